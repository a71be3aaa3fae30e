"""Overview charts: per-queue throughput and lag over the last minutes, labelled, with a scale."""

from __future__ import annotations

import pytest

from awa_tui.widgets.chart import nice_top
from tui.conftest import MEDIUM, NARROW, press, running_console, screen_text, seed_system


def test_the_scale_tops_at_a_round_number():
    assert [nice_top(v) for v in (0, 0.3, 1, 1.2, 3, 7, 42, 180, 999)] == \
        [1, 0.5, 1, 2, 5, 10, 50, 200, 1000]


@pytest.mark.parametrize("size", [pytest.param(NARROW, id="80x24"), pytest.param(MEDIUM, id="120x35")])
async def test_overview_charts_throughput_and_lag_per_queue(database_url, db, size):
    seed_system(db)
    async with running_console(database_url, size=size) as (app, pilot):
        for _ in range(4):  # four refreshes, 30 s apart: the email queue's lag grows
            app.clock.advance(30)
            await app.refresh_now()
        await press(app, pilot)
        screen = app.screen
        if size == NARROW:  # no room by default at 24 rows: g shows them
            assert not screen.query_one("#charts").display
            assert "g Charts" in screen_text(app).splitlines()[-1]
            await press(app, pilot, "g")
        assert screen.query_one("#charts").display
        text = screen_text(app)
        for label in ("Completed per second", "Lag (oldest runnable job)", "jobs/s", "seconds",
                      "minutes ago", "-10.0", "0.0"):
            assert label in text, label
        lag = screen.query_one("#lag-chart").series
        assert [round(v) for _, v in lag["email"]] == [40, 70, 100, 130, 160]  # +30 s a refresh
        assert list(lag)[0] == "email"  # the busiest first
        assert "200.0┤" in text  # the lag scale tops at a round number above 160 s
        assert "email" in text and "default" in text  # the legend names the queues
        await press(app, pilot, "g")
        assert not screen.query_one("#charts").display
