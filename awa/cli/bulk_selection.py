"""What every bulk command shares: ``--fingerprint``, ``--dry-run`` and ``--yes``.

``--dry-run`` prints exactly the jobs the command would touch (``awa.bulk_selection``'s
selection, the same one the command acts on) and changes nothing; on a terminal the
command asks before acting unless ``--yes``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import click

from awa.bulk_selection import BulkFilter, Target
from awa.cli.db import run_admin

SHOWN_IDS = 1_000  # a dry run lists at most this many ids (and says how many more)


def fingerprint_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--fingerprint", metavar="ID",
        help="Only jobs whose last error has this error fingerprint (the groups of "
             "`awa-ops diagnose dlq` and the console's DLQ screen).")(command)


def safety_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--yes", "-y", "yes", is_flag=True,
                           help="Do not ask for confirmation on a terminal.")(command)
    return click.option("--dry-run", is_flag=True,
                        help="Print what it would touch; change nothing.")(command)


def describe_targets(targets: list[Target]) -> list[str]:
    per = Counter((t.queue, t.kind) for t in targets)
    lines = [f"  queue {queue}, kind {kind}: {n}" for (queue, kind), n in sorted(per.items())]
    ids = [str(t.job_id) for t in targets[:SHOWN_IDS]]
    more = f" … and {len(targets) - SHOWN_IDS} more" if len(targets) > SHOWN_IDS else ""
    if ids:
        lines.append("  job ids: " + ", ".join(ids) + more)
    return lines


def preview_or_confirm(flt: BulkFilter, verb: str, *, dry_run: bool,
                       yes: bool) -> list[Target] | None:
    """The targets to act on (maybe none), or None when the command must not act (a dry
    run, or the operator said no)."""
    targets: list[Target] = run_admin(lambda c: c.select_bulk(flt))
    if dry_run:
        click.echo(f"dry run: would {verb} {len(targets)} {flt.describe()} (nothing changed)")
        for line in describe_targets(targets):
            click.echo(line)
        return None
    if not yes and targets and sys.stdin.isatty() and sys.stdout.isatty():
        for line in describe_targets(targets)[:20]:
            click.echo(line)
        if not click.confirm(f"{verb} {len(targets)} {flt.describe()}?", default=False):
            click.echo("nothing changed")
            return None
    return targets
