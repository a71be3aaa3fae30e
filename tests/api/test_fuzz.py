"""The REST API keeps its contract under any input: schemathesis generates requests from
the server's own OpenAPI document (every check: server errors, response schemas,
undocumented statuses, positive and negative data, undeclared methods, auth) against a
live ``awa serve`` on a database in every state (tests/api/populated.py).

Both engines, with and without a token, read-write and read-only; a fixed seed and a fresh
one.  A short budget here (the coverage phase's boundary cases and ``FUZZ_EXAMPLES``
generated requests per operation); ``benchmarks/api_fuzz.py`` runs long, every phase.
The one kind of failure not counted is a 400 for a rule JSON Schema cannot state
(tests/api/schemathesis_hooks.py).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import awa_serve
from .populated import populate

ST = Path(sys.executable).with_name("st")
HERE = Path(__file__).resolve().parent
FUZZ_EXAMPLES = 5  # a fixed amount of work a run (a time budget shrinks under load)
FIXED_SEED = 50
# (engine, token, read-only, seed): every value of the axes is in one run at least,
# no mode twice where once covers it (benchmarks/api_fuzz.py runs every combination long).
# Each engine's writes get a read-write run with the coverage phase (every parameter's
# boundary and wrong-type cases: the same whatever the seed, and most of the work); the
# token guards the writes in one of them.  One read-only run, with a token, on a fresh
# seed; its requests are all generated.
RUNS = [("queue_storage", False, False, FIXED_SEED), ("canonical", True, False, FIXED_SEED),
        ("queue_storage", True, True, None)]
FRESH_EXAMPLES = 15
COUNTED = {"ST101": "server errors", "ST108": "schema violations",
           "ST103": "undocumented statuses"}


def fuzz(base: str, seconds: int | None, seed: int, report: Path, token: str | None,
         workers: int = 1, examples: int = 5,
         phases: str = "examples,coverage,fuzzing") -> dict[str, Any]:
    """One schemathesis run; its JSON report.  ``seconds`` None: a fixed amount of work
    (the coverage phase's boundary cases and ``examples`` generated requests per operation;
    the stateful phase is the long run's), whatever the machine's load."""
    budget = ["--max-examples", str(examples), "--phases", phases] \
        if seconds is None else ["--max-time", str(int(seconds))]
    command = [str(ST), "run", f"{base}/api/openapi.json", "--checks", "all", *budget,
               "--seed", str(seed), "--workers", str(workers),
               "--request-timeout", "20", "--report", "json",
               "--report-json-path", str(report), "--no-shrink"]
    if token:
        command += ["--header", f"Authorization: Bearer {token}"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    # In the report's directory: schemathesis keeps a cache where it runs.
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=report.parent,
                          timeout=(seconds or 60) * 6 + 60)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(report.read_text())
    result["output"] = done.stdout
    return result


def summary(result: dict[str, Any]) -> dict[str, int]:
    counts = {name: 0 for name in COUNTED.values()}
    for failure in result["failures"]:
        if failure["code"] in COUNTED:
            counts[COUNTED[failure["code"]]] += failure["count"]
    counts["cases"] = result["test_cases"]["generated"]
    counts["failures"] = sum(f["count"] for f in result["failures"])
    counts["errors"] = sum(e["count"] for e in result["errors"])
    return counts


# A fixed amount of work (about 15 CPU-seconds a run), which a loaded CI machine stretches
# past the suite's 180 s default: this test bounds itself by work, not time.
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("engine", "with_token", "read_only", "seed"), [
    pytest.param(*run, marks=pytest.mark.engine(run[0]),
                 id=f"{run[0]}-{'token' if run[1] else 'open'}-{'ro' if run[2] else 'rw'}")
    for run in RUNS])
def test_the_api_keeps_its_contract_under_generated_requests(
        engine, with_token, read_only, seed, db, database_url, tmp_path):
    populate(db, database_url)
    fixed = seed is not None
    seed = seed if seed is not None else random.randrange(2**31)
    args: list[str] = ["--read-only"] if read_only else []
    token = None
    if with_token:
        token = "fuzz-" + uuid.uuid4().hex
        (tmp_path / "token").write_text(token)
        args += ["--token-file", str(tmp_path / "token")]
    with awa_serve(database_url, *args) as served:
        if fixed:
            result = fuzz(served.base, None, seed, tmp_path / "report.json", token,
                          examples=FUZZ_EXAMPLES)
        else:
            result = fuzz(served.base, None, seed, tmp_path / "report.json", token,
                          examples=FRESH_EXAMPLES, phases="examples,fuzzing")
    counts = summary(result)
    print(f"schemathesis {engine} token={with_token} read_only={read_only} seed={seed}: "
          f"{counts}")
    assert counts["cases"] > (1000 if fixed else 200), result["output"][-2000:]
    if counts["failures"] or counts["errors"]:
        print(result["output"])  # schemathesis' own account: each failure, with its curl
    assert counts["failures"] == 0 and counts["errors"] == 0, f"seed {seed}: {counts}"
