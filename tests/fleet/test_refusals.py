"""The Rust-core read-only engine: every Engine method is a read or a one-line refusal.

No database needed: a refusal is raised before any statement, so nothing of
ours can write into another engine's internals.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

import awa
from awa.storage.engine import Engine, ReadEngine
from awa.storage.rust_core import RUNTIME_WRITES, WRITE_COMMANDS, RustCoreEngine

PROTOCOL = sorted(n for n, v in inspect.getmembers(Engine)
                  if not n.startswith("_") and callable(v))
READS = {n for n, v in inspect.getmembers(ReadEngine) if not n.startswith("_") and callable(v)}


def test_every_engine_method_is_there() -> None:
    assert [n for n in PROTOCOL if not hasattr(RustCoreEngine, n)] == []


def test_every_write_is_refused() -> None:
    """What is not a read of ``ReadEngine`` is a refusal (``RustCoreEngine``'s class body)."""
    assert sorted(set(PROTOCOL) - READS - {*WRITE_COMMANDS, *RUNTIME_WRITES}) == []


@pytest.mark.parametrize("schema", [None, "awa"])
@pytest.mark.parametrize("method", sorted({*WRITE_COMMANDS, *RUNTIME_WRITES}))
def test_writes_refuse_with_one_line(method: str, schema: str | None) -> None:
    engine = RustCoreEngine(schema)
    call = getattr(engine, method)
    with pytest.raises(awa.ForeignSchema) as refused:
        if method.endswith("_sync"):
            call(None, None)
        else:
            asyncio.run(call(None, None))
    text = str(refused.value)
    assert "\n" not in text and "Rust-core awa 0.6" in text
    if method in WRITE_COMMANDS:
        assert f"`{WRITE_COMMANDS[method]}`" in text


def test_the_rust_cli_spelling() -> None:
    assert WRITE_COMMANDS["cancel"] == "awa job cancel <id>"
    assert WRITE_COMMANDS["pause_queue"] == "awa queue pause <queue>"
    assert WRITE_COMMANDS["retry_from_dlq"] == "awa dlq retry <id>"
