"""A private primary and its hot standby (streaming replication), for read-only ops tests.

    with ReplicaPair() as pair:                       # or the ``replica_pair`` fixture
        primary = pair.primary.url("awa")             # a migrated database "awa"
        standby = pair.standby.url("awa")             # the same, read-only, replayed
        pair.wait_replayed()                          # the standby has caught up

The standby is made with ``pg_basebackup -R`` (it writes ``standby.signal`` and
``primary_conninfo``) from a ``support.pgcluster.PrivateCluster`` primary, and is a
``PrivateCluster`` itself (its own port, ``stop()``/``start()``, removed on close).
``hot_standby_feedback=True`` makes the standby's queries hold the primary's xmin
horizon back (what ``awa-ops diagnose mvcc-horizon`` must name as a source).
"""

from __future__ import annotations

import time

import psycopg

from awa import storage
from support.pgcluster import PrivateCluster

DATABASE = "awa"
REPLAY_TIMEOUT_S = 30.0


class ReplicaPair:
    def __init__(self, *, hot_standby_feedback: bool = False,
                 engine: str | None = None, slot: str | None = None) -> None:
        """``slot``: the standby streams through this physical replication slot (created by
        pg_basebackup), which keeps the xmin its feedback reported after it is gone."""
        self.hot_standby_feedback = hot_standby_feedback
        self.engine = engine
        self.slot = slot
        self.primary = PrivateCluster("-c", "wal_level=replica", "-c", "max_wal_senders=5")
        self.standby: PrivateCluster | None = None

    def start(self) -> None:
        self.primary.start()
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(self.primary.url(DATABASE), autocommit=True) as conn:
            storage.migrate_sync(conn, self.engine, None)
        standby = PrivateCluster("-c", "hot_standby=on", init=False)
        standby._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port),
                     "-U", "postgres", "-D", str(standby.data), "-R", "-X", "stream",
                     "--no-sync", *(("-C", "-S", self.slot, "--checkpoint", "fast")
                                    if self.slot else ()))
        self.standby = standby
        self._write_feedback(self.hot_standby_feedback)
        standby.start()
        self.wait_replayed()

    def _write_feedback(self, on: bool) -> None:
        # In postgresql.auto.conf (where -R put primary_conninfo), not on the command line:
        # a reload can change it there.
        assert self.standby is not None
        conf = self.standby.data / "postgresql.auto.conf"
        kept = [line for line in conf.read_text().splitlines()
                if not line.startswith("hot_standby_feedback")]
        conf.write_text("\n".join([*kept, f"hot_standby_feedback = {'on' if on else 'off'}"])
                        + "\n")

    def set_hot_standby_feedback(self, on: bool) -> None:
        """Turn the standby's feedback on or off (a reload, no restart)."""
        assert self.standby is not None
        self._write_feedback(on)
        self.hot_standby_feedback = on
        self.standby._run("pg_ctl", "-D", str(self.standby.data), "reload")

    def url(self, which: str = "standby") -> str:
        cluster = self.standby if which == "standby" else self.primary
        assert cluster is not None, "start() first"
        return cluster.url(DATABASE)

    @property
    def primary_url(self) -> str:
        return self.url("primary")

    @property
    def standby_url(self) -> str:
        return self.url("standby")

    def wait_replayed(self, timeout: float = REPLAY_TIMEOUT_S) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url("standby"), autocommit=True) as conn:
                    done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                        (target,)).fetchone()
                if done and done[0]:
                    return
            except psycopg.Error:
                pass  # still starting up
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby did not replay up to {target} in {timeout}s")
            time.sleep(0.05)

    def close(self) -> None:
        if self.standby is not None:
            self.standby.close()
        self.primary.close()

    def __enter__(self) -> ReplicaPair:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
