"""``awa-ops generate``: write (or ``--check``) the dashboards and alert rules.

Outside the ``awa_ops.generate`` package, which needs the ``ops`` extra
(grafana-foundation-sdk, pyyaml): ``awa-ops`` lists this command without
it, and running it says which extra to install.
"""

from __future__ import annotations

import click

from awa import extras


@click.command("generate")
@click.option("--out", "out_dir", default=".", show_default=True,
              type=click.Path(file_okay=False),
              help="Directory that receives dashboards/ and alerts/.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 when a generated file is missing or differs.")
@click.option("--thresholds", "thresholds_file", type=click.Path(dir_okay=False),
              help="YAML file overriding alert thresholds (and 'for:' durations per alert).")
@click.option("--runbook-base-url", default=None,
              help="Prefix of runbook links (runbooks/alerts/<Alert>.md is appended); "
                   "default: none, so links are repository-relative.")
def generate_command(out_dir: str, check: bool, thresholds_file: str | None,
                     runbook_base_url: str | None) -> None:
    """Generate Grafana dashboards and Prometheus alert rules from the metric catalogue."""
    extras.require("ops", "awa-ops generate")
    from awa_ops.generate import generate
    from awa_ops.generate.alerts import (
        DEFAULT_RUNBOOK_BASE_URL,
        ThresholdsError,
        load_thresholds,
    )

    if runbook_base_url is None:
        runbook_base_url = DEFAULT_RUNBOOK_BASE_URL
    try:
        thresholds = load_thresholds(thresholds_file)
    except ThresholdsError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        changed = generate(out_dir, check=check, thresholds=thresholds,
                           runbook_base_url=runbook_base_url)
    except OSError as exc:
        raise click.ClickException(f"cannot write under {out_dir}: {exc.strerror or exc}") from None
    if check:
        if changed:
            for path in changed:
                click.echo(f"out of date: {path}", err=True)
            click.echo("run `awa-ops generate` and commit the result", err=True)
            raise SystemExit(1)
        click.echo("generated files are up to date")
        return
    for path in changed:
        click.echo(f"wrote {path}")
    if not changed:
        click.echo("generated files are up to date")
