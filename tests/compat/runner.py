"""Runs compat scenarios under whichever ``awa`` this interpreter imports; prints JSON.

    python runner.py DATABASE_URL NAME...    (migrates the database first, with that awa)

Executed twice by tests/compat/test_compat.py: once under the real awa-pg 0.6.9
(its cached venv) and once under ours, each on its own fresh database.  Every
scenario returns a JSON-able summary, or the name of what it raised; the test
compares the two sides.  Standard library + awa (+ psycopg) only.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# Run as a script under either distribution's venv: scenarios.py sits beside it.
sys.path.insert(0, str(Path(__file__).parent))
import scenarios  # type: ignore[import-not-found]  # noqa: E402 - found on the path set above

import awa  # noqa: E402

PER_SCENARIO_TIMEOUT = 30.0


class Ctx:
    """What a scenario gets: the database, its own queue name, and a shared client."""

    def __init__(self, url: str, name: str, client: Any) -> None:
        self.url = url
        self.q = "c_" + name[:40]
        self.client = client
        self.is_ref = hasattr(awa, "_awa")

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Arrange or observe state with plain SQL (autocommit, %s placeholders)."""
        import psycopg
        from psycopg.rows import dict_row
        with psycopg.connect(self.url, autocommit=True, row_factory=dict_row) as conn:
            cur = conn.execute(query, params)
            return list(cur.fetchall()) if cur.description else []


def _raised(exc: BaseException) -> str:
    return scenarios.raised(exc)


def run_sync(fn: Any, url: str, client: Any) -> Any:
    started = time.monotonic()
    try:
        return fn(Ctx(url, fn.__name__, client))
    except Exception as exc:  # the scenario's outcome
        return _raised(exc)
    finally:
        _timed(fn, started)


async def run_async(fn: Any, url: str, client: Any) -> Any:
    started = time.monotonic()
    try:
        return await asyncio.wait_for(fn(Ctx(url, fn.__name__, client)), PER_SCENARIO_TIMEOUT)
    except Exception as exc:
        return _raised(exc)
    finally:
        _timed(fn, started)


def _timed(fn: Any, started: float) -> None:
    took = time.monotonic() - started
    if took > 1.0:
        print(f"slow scenario {fn.__name__}: {took:.1f}s", file=sys.stderr)


async def run_all_async(url: str, fns: list[Any], out: dict[str, Any]) -> None:
    client = awa.AsyncClient(url)
    try:
        for fn in fns:
            out[fn.__name__] = await run_async(fn, url, client)
    finally:
        await client.close()


def main() -> None:
    url, names = sys.argv[1], sys.argv[2:]
    wanted = [scenarios.REGISTRY[n] for n in names] if names else list(scenarios.REGISTRY.values())
    migrator = awa.Client(url)
    migrator.migrate()
    migrator.close()
    out: dict[str, Any] = {}
    sync_fns = [f for f in wanted if not inspect.iscoroutinefunction(f)]
    async_fns = [f for f in wanted if inspect.iscoroutinefunction(f)]
    async_fns.sort(key=lambda f: f.__name__ in scenarios.RUN_LAST)
    client = awa.Client(url)
    try:
        for fn in sync_fns:
            out[fn.__name__] = run_sync(fn, url, client)
    finally:
        client.close()
    try:
        asyncio.run(run_all_async(url, async_fns, out))
    except Exception:
        traceback.print_exc()
    json.dump(scenarios.jsonable(out), sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
