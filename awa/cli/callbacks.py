"""``awa callbacks``: resolve external callbacks from the shell, or serve the HTTP receiver.

Each resolution command is one client method (the same code as the API and
the HTTP receiver); a second or late resolution prints the one-line
"not found or already resolved" error and exits 1.
"""

from __future__ import annotations

import json
from typing import Any

import click

from awa import callback_contract, config, extras
from awa.callback_server import CallbackApp, load_secret, parse_listen, serve_forever
from awa.callbacks import ResolveResult
from awa.cli.options import (
    database_url_option,
    json_option,
    print_json,
    resolved_database_url,
    run_client,
)
from awa.db import one_line


def _payload(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {one_line(exc)}",
                                 param_hint="--payload") from None
    if value is not None and not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--payload")
    return value


def _resolve(method: str, callback_id: str, *args: Any, as_json: bool) -> None:
    result = run_client(lambda client: getattr(client, method)(callback_id, *args))
    job = (result.job or result.waiting) if isinstance(result, ResolveResult) else result
    doc: dict[str, Any] = {"id": callback_id, "job_id": job.id if job else None,
                           "state": job.state.value if job else None}
    if isinstance(result, ResolveResult):
        doc.update(outcome=result.outcome, reason=result.reason, payload=result.payload)
    if as_json:
        print_json(doc)
        return
    extra = f" ({result.outcome}: {result.reason})" if isinstance(result, ResolveResult) else ""
    click.echo(f"callback {callback_id}: job {doc['job_id']} is {doc['state']}{extra}")


@click.group("callbacks")
@database_url_option
def callbacks() -> None:
    """Resolve external callbacks, or serve the HTTP callback receiver."""


@callbacks.command("complete")
@click.argument("callback_id")
@click.option("--payload", default=None, help="JSON object stored as the job's result.")
@database_url_option
@json_option
def complete_cmd(callback_id: str, payload: str | None, as_json: bool) -> None:
    """Complete the job waiting on CALLBACK_ID."""
    _resolve("complete_external", callback_id, _payload(payload), as_json=as_json)


@callbacks.command("fail")
@click.argument("callback_id")
@click.option("--error", required=True, help="The error recorded on the job.")
@database_url_option
@json_option
def fail_cmd(callback_id: str, error: str, as_json: bool) -> None:
    """Fail the job waiting on CALLBACK_ID."""
    _resolve("fail_external", callback_id, error, as_json=as_json)


@callbacks.command("retry")
@click.argument("callback_id")
@database_url_option
@json_option
def retry_cmd(callback_id: str, as_json: bool) -> None:
    """Run the job waiting on CALLBACK_ID again from scratch (attempt reset to 0)."""
    _resolve("retry_external", callback_id, as_json=as_json)


@callbacks.command("resume")
@click.argument("callback_id")
@click.option("--payload", default=None, help="JSON object handed to the waiting handler.")
@database_url_option
@json_option
def resume_cmd(callback_id: str, payload: str | None, as_json: bool) -> None:
    """Resume the handler waiting on CALLBACK_ID (it receives the payload)."""
    _resolve("resume_external", callback_id, _payload(payload), as_json=as_json)


@callbacks.command("heartbeat")
@click.argument("callback_id")
@click.option("--timeout-seconds", type=float, show_default=True,
              default=callback_contract.DEFAULT_HEARTBEAT_TIMEOUT_SECS)
@database_url_option
@json_option
def heartbeat_cmd(callback_id: str, timeout_seconds: float, as_json: bool) -> None:
    """Extend the wait of CALLBACK_ID to now + --timeout-seconds."""
    _resolve("heartbeat_callback", callback_id, timeout_seconds, as_json=as_json)


@callbacks.command("resolve")
@click.argument("callback_id")
@click.option("--payload", default=None, help="JSON object the CEL expressions see.")
@click.option("--default-action", type=click.Choice(["ignore", "complete", "fail"]),
              default="ignore", show_default=True)
@database_url_option
@json_option
def resolve_cmd(callback_id: str, payload: str | None, default_action: str,
                as_json: bool) -> None:
    """Let the callback's CEL rules decide: filter, on_fail, on_complete, default."""
    _resolve("resolve_callback", callback_id, _payload(payload), default_action,
             as_json=as_json)


@callbacks.command("serve")
@click.option("--listen", default=config.CALLBACK_LISTEN, show_default=True, help="HOST:PORT.")
@click.option("--secret-file", default=None, metavar="PATH",
              help="File holding the 32-byte secret (raw, or 64 hex characters).")
@click.option("--secret-env", default=None, metavar="NAME",
              help="Environment variable holding the secret as 64 hex characters.")
@click.option("--allow-unsigned", is_flag=True,
              help="Accept requests without X-Awa-Signature (development only).")
@click.option("--max-body-bytes", type=click.IntRange(min=1), show_default=True,
              default=config.CALLBACK_MAX_BODY_BYTES)
@click.option("--path-prefix", default=callback_contract.DEFAULT_PATH_PREFIX, show_default=True)
@database_url_option
def serve_cmd(listen: str, secret_file: str | None, secret_env: str | None,
              allow_unsigned: bool, max_body_bytes: int, path_prefix: str) -> None:
    """Serve POST <prefix>/<callback_id>/complete|fail|heartbeat|resume over HTTP."""
    extras.require("callbacks", "awa callbacks serve")
    host, port = parse_listen(listen)
    run_client(lambda client: client.check_database())  # unreachable/unmigrated: fail now
    app = CallbackApp(database_url=resolved_database_url(),
                      secret=load_secret(secret_file, secret_env),
                      allow_unsigned=allow_unsigned, max_body_bytes=max_body_bytes,
                      path_prefix=path_prefix)
    serve_forever(app, host, port)
