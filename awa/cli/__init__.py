"""The `awa` command: one module per command group, the shared plumbing in ``options``.

    db.py                awa migrate, awa db
    adopt.py             awa adopt [--dry-run|--abort|--finalize]
    jobs.py              awa job list|dump|cancel|retry|retry-failed|discard
    queues.py            awa queue stats|pause|resume|drain
    dlq.py               awa dlq depth|list|retry|retry-bulk|purge|move
    cron.py              awa cron list|remove|pause|resume|trigger
    callbacks.py         awa callbacks complete|fail|retry|resume|heartbeat|resolve|serve
    worker.py            awa worker MODULE:CLIENT
    health.py            awa health: readiness from the database alone (exit 0/1/2)
    batch_operations.py  awa batch preview|start|status|cancel (durable set_priority /
                         move_queue over a filter: awa.batch_operations)
    storage.py           awa storage status|prepare|enter-mixed|finalize|abort (the live
                         engine switch)
    bulk_selection.py    what the bulk commands (dlq retry-bulk|purge|move, job
                         retry-failed) share: --fingerprint, --dry-run, --yes
                         (awa.bulk_selection's rule)
    options.py           --database-url, --json, run_client, output, the one-line error
                         handling

Every command is a thin shell over one client method, so the CLI, the TUI
and awa-ops share one implementation.  A new group is one module here plus
one ``main.add_command(...)`` line below; packages outside ``awa`` contribute
through the ``awa.commands`` entry-point group instead (e.g. ``awa serve``).
The helpers are re-exported here for those plugins.
"""

from __future__ import annotations

import click

from awa.cli.adopt import adopt_command
from awa.cli.batch_operations import batch_group
from awa.cli.callbacks import callbacks
from awa.cli.cron import cron
from awa.cli.db import db_command, migrate
from awa.cli.dlq import dlq
from awa.cli.health import health_command
from awa.cli.jobs import job
from awa.cli.options import (
    PLUGIN_GROUP,
    AwaGroup,
    current_database_url,
    database_url_option,
    fail,
    json_option,
    print_json,
    print_table,
    resolved_database_url,
    run_client,
    to_jsonable,
)
from awa.cli.queues import queue
from awa.cli.storage import storage_group
from awa.cli.worker import worker_command


@click.group(cls=AwaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="awa-py", prog_name="awa")
@database_url_option
def main() -> None:
    """awa: a Postgres-native job queue. Inspect and operate it from the shell."""


for _command in (migrate, adopt_command, db_command, job, queue, dlq, worker_command, cron,
                 callbacks, health_command, batch_group, storage_group):
    main.add_command(_command)

__all__ = [
    "PLUGIN_GROUP", "AwaGroup", "current_database_url", "database_url_option", "fail",
    "json_option", "main", "print_json", "print_table", "resolved_database_url", "run_client",
    "to_jsonable",
]
