"""The incident matrix, whole (issue 46): every scenario of tests/incidents/expected.yaml on
both engines, then each signal's precision, recall and time to detect.

    python3 dev.py bench benchmarks/incident_matrix.py                       # all, both engines
    python3 dev.py bench benchmarks/incident_matrix.py --engines queue_storage --only no_leader
    python3 dev.py bench benchmarks/incident_matrix.py --parallel 2 --json out.json

Each scenario runs in a scratch database of a private PostgreSQL cluster this script starts
(max_connections 400: three scenarios at once, each with its workers, exporter and
observers, never contend with whatever else uses the shared server; ``--shared-server``
uses that instead), against real worker processes, `awa-ops exporter`
and a real Prometheus on the matrix's clock (tests/incidents/harness.py: SCALE = 1/15, so
a scenario of 120 s plays 30 production minutes).  The table prints, per scenario and
engine, each alert expected and seen (with when, in production minutes), every false or
missing signal, and per signal kind: true positives, false positives, false negatives,
precision and recall; and per incident, the time to detect of its first expected alert.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _support import admin_url, create_database, drop_database  # the script's own dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the matrix lives with the tests

from incidents.harness import production_minutes  # noqa: E402 (needs tests/ on the path)
from incidents.scenarios import expectations, run  # noqa: E402 (needs tests/ on the path)
from support.pgcluster import PrivateCluster  # noqa: E402 (needs tests/ on the path)


def play(admin: str, name: str, engine: str) -> dict:
    own = expectations()[name].get("own_cluster")
    if own is not None:
        # a server-wide incident (a slot, a stopped server) gets a server of its own, so it
        # cannot leak into the scenarios running beside it
        cluster = PrivateCluster(*CLUSTER_SETTINGS, *(str(x) for x in own))
        cluster.start()
        admin = cluster.url()
    database = f"awa_incident_{uuid.uuid4().hex[:8]}"
    try:
        url = create_database(admin, database, engine)
        try:
            with tempfile.TemporaryDirectory(prefix=f"awa-incident-{name}-") as directory:
                try:
                    verdict = run(name, url, Path(directory),
                                  cluster=cluster if own is not None else None)
                except Exception as exc:  # noqa: BLE001 - one broken scenario, not the run
                    return {"scenario": name, "engine": engine, "expected": {}, "seen": {},
                            "tally": [], "problems": [f"the scenario did not run: "
                                                      f"{type(exc).__name__}: {exc}"[:300]]}
        finally:
            drop_database(admin, database)
    finally:
        if own is not None:
            cluster.close()
    return {
        "scenario": name, "engine": engine, "problems": verdict.problems,
        "expected": verdict.alerts_expected,
        "seen": {a.name: round(a.at_s, 1) for a in verdict.alerts_seen.values()},
        "tally": verdict.tally,
    }


# The private cluster's settings (and those of a scenario's own cluster, before its
# own_cluster settings from expected.yaml).
CLUSTER_SETTINGS = ("-c", "max_connections=400")


def rate(numerator: int, denominator: int) -> str:
    return f"{100 * numerator / denominator:.0f} %" if denominator else "n/a"


def report(results: list[dict]) -> None:
    print("\n| scenario | engine | alerts expected (within, prod min) | alerts seen (at, prod "
          "min) | verdict |")
    print("|---|---|---|---|---|")
    for r in results:
        want = ", ".join(f"{k} ({production_minutes(v):.1f})" for k, v in r["expected"].items())
        seen = ", ".join(f"{k} ({production_minutes(v):.1f})" for k, v in r["seen"].items())
        print(f"| {r['scenario']} | {r['engine']} | {want or '-'} | {seen or '-'} | "
              f"{'exact' if not r['problems'] else '; '.join(r['problems'])[:400]} |")
    for kind in ("alert", "diagnose"):
        tp = fp = fn = 0
        for r in results:
            for signal, expected, seen in r["tally"]:
                if signal.startswith(kind + ":"):
                    tp += expected and seen
                    fp += seen and not expected
                    fn += expected and not seen
        print(f"\n{kind}s: {tp} true positives, {fp} false positives, {fn} false negatives; "
              f"precision {rate(tp, tp + fp)}, recall {rate(tp, tp + fn)}")
    print("\ntime to detect (the first expected alert, production minutes):")
    for r in results:
        firsts = [r["seen"][k] for k in r["expected"] if k in r["seen"]]
        if r["expected"]:
            print(f"  {r['scenario']:<28} {r['engine']:<14} "
                  + (f"{production_minutes(min(firsts)):.1f}" if firsts else "missed"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="queue_storage,canonical")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--parallel", type=int, default=1,
                        help="scenarios at once (each runs 2-3 worker processes)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--shared-server", action="store_true",
                        help="use the test server (AWA_TEST_DATABASE_URL, ...) instead of a "
                             "private cluster")
    args = parser.parse_args()
    names = list(expectations())
    if args.only:
        unknown = set(args.only.split(",")) - set(names)
        if unknown:
            parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(names)}")
        names = [n for n in names if n in args.only.split(",")]
    specs = expectations()
    # a scenario whose incident exists on some engines only (engines: in expected.yaml)
    jobs = [(n, e) for e in args.engines.split(",") for n in names
            if e in specs[n].get("engines", [e])]
    cluster = None if args.shared_server else PrivateCluster(*CLUSTER_SETTINGS)
    try:
        if cluster is not None:
            cluster.start()
        admin = admin_url() if cluster is None else cluster.url()
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            results = list(pool.map(lambda job: play(admin, *job), jobs))
    finally:
        if cluster is not None:
            cluster.close()
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
