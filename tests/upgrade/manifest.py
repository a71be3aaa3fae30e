"""What a release installs and calls: its manifest, and the check that a newer layout keeps it.

A manifest lists the objects in schema ``awa`` of a database migrated by one release, each as
a line its code depends on: ``function awa.qs_claim(p_queue text, ...) -> TABLE(...)``,
``column awa.leases.claimed_by uuid``, ``view awa.jobs``, ``trigger
awa.jobs.awa_jobs_view_update``, ``enum awa.job_state = 'running'``.  Indexes, constraints and
defaults are left out: dropping one changes no statement's meaning.  Expand/contract
(docs/architecture.md) says every line of the previous releases' manifests is still there
after this code's ``awa migrate``; tests/upgrade/test_manifests.py checks it.

    python tests/upgrade/manifest.py RELEASE [RELEASE...]   # RELEASE: a key of PREVIOUS,
                                                           # or "current" (this checkout)

writes ``tests/upgrade/manifests/<name>-<engine>.json`` for both engines, each from a
database that release's own ``awa migrate`` laid out (a scratch database, dropped after).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
MANIFESTS = HERE / "manifests"
ENGINES = ("queue_storage", "canonical")

OBJECTS = """
SELECT 'function awa.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid)
       || ') -> ' || pg_get_function_result(p.oid) AS line
  FROM pg_proc p WHERE p.pronamespace = 'awa'::regnamespace
UNION ALL
SELECT CASE c.relkind WHEN 'v' THEN 'view ' WHEN 'S' THEN 'sequence ' ELSE 'table ' END
       || 'awa.' || c.relname
  FROM pg_class c
 WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
   AND NOT c.relispartition
UNION ALL
SELECT 'column awa.' || c.relname || '.' || a.attname || ' '
       || format_type(a.atttypid, a.atttypmod)
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
 WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind IN ('r', 'p', 'v')
   AND NOT c.relispartition AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'trigger awa.' || c.relname || '.' || t.tgname
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'awa'::regnamespace AND NOT t.tgisinternal AND NOT c.relispartition
UNION ALL
SELECT 'enum ' || e.enumtypid::regtype::text || ' = ' || quote_literal(e.enumlabel)
  FROM pg_enum e JOIN pg_type ty ON ty.oid = e.enumtypid
 WHERE ty.typnamespace = 'awa'::regnamespace
ORDER BY 1"""


def installed(url: str) -> list[str]:
    """The manifest lines of the database at ``url``, sorted."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute(OBJECTS).fetchall()]


def missing(manifest: list[str], now: list[str]) -> list[str]:
    """The lines of ``manifest`` that ``now`` lacks."""
    have = set(now)
    return [line for line in manifest if line not in have]


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def record(name: str, sha: str, engine: str, url: str) -> Path:
    """Write ``<name>-<engine>.json`` from the database at ``url``."""
    MANIFESTS.mkdir(exist_ok=True)
    path = MANIFESTS / f"{name}-{engine}.json"
    path.write_text(json.dumps({"release": name, "commit": sha, "engine": engine,
                                "objects": installed(url)}, indent=1) + "\n")
    return path


def main(names: list[str]) -> int:
    sys.path.insert(0, str(HERE.parent))
    from support.databases import _admin_url, create_database, drop_database
    from upgrade.releases import PREVIOUS, build
    from upgrade.rolling import CURRENT, Code, database_url

    admin = _admin_url()
    for name in names:
        if name == "current":
            code, sha = CURRENT, subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE,
                                                capture_output=True, text=True).stdout.strip()
            name = CURRENT.name
        else:
            release = build(name)
            code, sha = Code.of(release), PREVIOUS[name]
        for engine in ENGINES:
            db = create_database(admin)
            try:
                url = database_url(admin, db)
                code.migrate(url, engine).check_returncode()
                print(record(name, sha, engine, url))
            finally:
                drop_database(admin, db)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["current"]))
