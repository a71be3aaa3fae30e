"""Running on a queue-storage database (laid out by the Rust core's own `awa` CLI): leases."""

from __future__ import annotations

from ops.test_queue_storage import (
    awa_cli,  # noqa: F401 - a pytest fixture: the tests below request it by name
    insert_stale_lease,
    route_to_queue_storage,
)
from tui.conftest import press, running_console, screen_text


async def test_running_shows_queue_storage_leases(awa_cli, empty_database_url):  # noqa: F811
    url = empty_database_url
    route_to_queue_storage(awa_cli, url)
    insert_stale_lease(url)
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
