"""Keyset paging of /api/jobs: every one of 10,000 jobs exactly once, on both engines."""

from __future__ import annotations

import httpx
import pytest

from .conftest import awa_serve
from .test_routes import ENGINES

TOTAL = 10_000


def walk(http: httpx.Client, page: int, **params: str) -> list[int]:
    """Every id /api/jobs returns, following ``before_id`` until an empty page."""
    seen: list[int] = []
    before: int | None = None
    while True:
        query = {**params, "limit": str(page)}
        if before is not None:
            query["before_id"] = str(before)
        rows = http.get("/api/jobs", params=query).json()
        if not rows:
            return seen
        ids = [r["id"] for r in rows]
        assert ids == sorted(ids, reverse=True) and len(ids) <= page
        seen += ids
        before = ids[-1]


@pytest.mark.parametrize("engine", ENGINES)
async def test_keyset_paging_returns_every_job_exactly_once(engine, client, database_url):
    inserted: list[int] = []
    for start in range(0, TOTAL, 2_500):
        jobs = await client.insert_many_copy([{"n": i} for i in range(start, start + 2_500)],
                                             kind="paged", queue="bulk")
        inserted += [j.id for j in jobs]
    tagged = await client.insert_many([{"t": i} for i in range(37)], kind="paged",
                                      queue="bulk", tags=["marked"])
    assert len(set(inserted)) == TOTAL
    with awa_serve(database_url) as served, served.client() as http:
        seen = walk(http, 1_000, kind="paged")
        assert len(seen) == len(set(seen)) == TOTAL + 37
        assert set(seen) == set(inserted) | {j.id for j in tagged}
        # An odd page size and a filter: the tagged jobs, each once.
        marked = walk(http, 7, tag="marked")
        assert sorted(marked) == sorted(j.id for j in tagged)
        # The limit is clamped to 1..1000.
        assert len(http.get("/api/jobs", params={"limit": 5_000}).json()) == 1_000
        assert len(http.get("/api/jobs", params={"limit": 0}).json()) == 1
