"""Helpers for the foundation tests: listeners and row lookups on real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest


@dataclass
class SendEmail:
    to: str
    subject: str = "hi"


@dataclass
class HTMLToPDF:
    url: str


class Listener:
    """A LISTENing connection that reports the notifications it received."""

    def __init__(self, url: str, *channels: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        for channel in channels:
            self.conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))

    def received(self, timeout: float = 2.0) -> list[tuple[str, str]]:
        return [(n.channel, n.payload)
                for n in self.conn.notifies(timeout=timeout, stop_after=1)]

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def listen(database_url: str) -> Iterator[Callable[..., Listener]]:
    opened: list[Listener] = []

    def make(*channels: str) -> Listener:
        listener = Listener(database_url, *channels)
        opened.append(listener)
        return listener
    yield make
    for listener in opened:
        listener.close()


def count_jobs(db, **where) -> int:
    sql = "SELECT count(*) AS n FROM awa.jobs"
    if where:
        sql += " WHERE " + " AND ".join(f"{k} = %({k})s" for k in where)
    return db.execute(sql, where).fetchone()["n"]
