"""The REST API under a long property-based run: schemathesis (every check) against a live
``awa serve``, as tests/api/test_fuzz.py does in seconds, for as long as asked.

    .venv/bin/python benchmarks/api_fuzz.py [--seconds 150] [--seed N]
        [--engine all|canonical|queue_storage] [--modes open-rw,token-rw,token-ro,open-ro]
        [--workers 1]

For each engine and mode (with or without a bearer token, read-write or read-only) a fresh
database is populated in every state (tests/api/populated.py), ``awa serve`` starts on it
and schemathesis runs ``--seconds`` from the server's own OpenAPI document.  Prints the
cases generated and, per run, the server errors, schema violations and undocumented
statuses (and every other failure schemathesis reports; tests/api/schemathesis_hooks.py
says the two kinds not counted).  Exit 1 when any run has a failure or an error.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import uuid
from pathlib import Path

import _support
import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(_support.ROOT / "tests"))

from api.conftest import awa_serve  # noqa: E402 (tests/ put on sys.path above)
from api.populated import populate  # noqa: E402 - likewise
from api.test_fuzz import fuzz, summary  # noqa: E402 - likewise

ENGINES = ("queue_storage", "canonical")
MODES = ("open-rw", "token-rw", "token-ro", "open-ro")


def run(engine: str, mode: str, seconds: int, seed: int, workers: int) -> dict[str, int]:
    with _support.scratch_database("awa_api_fuzz", engine) as url, \
            tempfile.TemporaryDirectory() as scratch:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as db:
            populate(db, url)
        args: list[str] = ["--read-only"] if mode.endswith("-ro") else []
        token = None
        if mode.startswith("token"):
            token = "fuzz-" + uuid.uuid4().hex
            (Path(scratch) / "token").write_text(token)
            args += ["--token-file", str(Path(scratch) / "token")]
        with awa_serve(url, *args) as served:
            result = fuzz(served.base, seconds, seed, Path(scratch) / "report.json", token,
                          workers=workers)
        counts = summary(result)
        if counts["failures"] or counts["errors"]:
            print(result["output"])
        return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=150)
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh one")
    parser.add_argument("--engine", choices=("all", *ENGINES), default="all")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    engines = ENGINES if args.engine == "all" else (args.engine,)
    print(f"seed {seed}, {args.seconds:.0f} s a run")
    print(f"{'engine':<14} {'mode':<9} {'cases':>7} {'5xx':>5} {'schema':>7} "
          f"{'undoc.':>7} {'failures':>9} {'errors':>7}")
    bad = False
    for engine in engines:
        for mode in modes:
            c = run(engine, mode, args.seconds, seed, args.workers)
            bad = bad or bool(c["failures"] or c["errors"])
            print(f"{engine:<14} {mode:<9} {c['cases']:>7} {c['server errors']:>5} "
                  f"{c['schema violations']:>7} {c['undocumented statuses']:>7} "
                  f"{c['failures']:>9} {c['errors']:>7}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
