"""Running on a queue-storage database (laid out by the Rust core's own `awa` CLI): leases."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from test_queue_storage import QS_SCHEMA, awa_cli, rust_awa  # noqa: E402,F401 (awa_cli: fixture)

from tui.conftest import press, running_console, screen_text  # noqa: E402


async def test_running_shows_queue_storage_leases(awa_cli, empty_database_url):  # noqa: F811
    url = empty_database_url
    rust_awa(awa_cli, url, "migrate")
    rust_awa(awa_cli, url, "storage", "prepare-queue-storage-schema", "--schema", QS_SCHEMA)
    rust_awa(awa_cli, url, "storage", "prepare", "--engine", "queue_storage",
             "--details", json.dumps({"schema": QS_SCHEMA}))
    rust_awa(awa_cli, url, "storage", "enter-mixed-transition", "--quiesced")
    rust_awa(awa_cli, url, "storage", "finalize")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"""INSERT INTO {QS_SCHEMA}.leases (lease_slot, lease_generation, ready_slot,
                         ready_generation, job_id, queue, priority, lane_seq, heartbeat_at,
                         deadline_at, attempted_at)
                         VALUES (0, 0, 0, 0, 4711, 'email', 2, 1, now() - interval '5 minutes',
                                 now() + interval '1 minute', now() - interval '6 minutes')""")
    async with running_console(url, clock=None, stale_after_s=90) as (app, pilot):
        assert "cannot" not in screen_text(app).lower()
        await press(app, pilot, "2")
        table = app.screen.query_one("#running")
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert len(rows) == 1
        status, job_id, queue, heartbeat = rows[0][1], rows[0][2], rows[0][4], rows[0][8]
        assert (job_id, queue) == ("4711", "email")
        assert status == "orphaned"  # no runtime serves "email" and the heartbeat is 5 min old
        assert heartbeat.startswith("5m")
        assert app.problem is None
