"""Input PostgreSQL cannot store is refused before any write, with one line saying what to fix."""

from __future__ import annotations

import psycopg
import pytest

import awa
import awa.bridge

from .test_cli import awa_cmd

NUL = "\x00"


@pytest.mark.parametrize("field, kwargs", [
    ("queue name", {"queue": f"em{NUL}ail"}),
    ("kind", {"kind": f"send{NUL}"}),
    ("tag", {"tags": ["ok", f"bad{NUL}tag"]}),
    ("metadata", {"metadata": {"note": f"a{NUL}b"}}),
])
async def test_nul_in_names_tags_and_metadata_is_refused(client, db, field, kwargs):
    kwargs.setdefault("kind", "send")
    for insert in (client.insert, lambda args, **kw: client.insert_many([args], **kw),
                   lambda args, **kw: client.enqueue_many_copy([args], **kw)):
        with pytest.raises(awa.ValidationError) as info:
            await insert({"to": "a@example.com"}, **kwargs)
        message = str(info.value)
        assert field in message and "NUL" in message and "\n" not in message
    assert db.execute("SELECT count(*) AS n FROM awa.jobs").fetchone()["n"] == 0


async def test_nul_in_args_is_refused_but_a_literal_backslash_u0000_is_kept(client, db):
    with pytest.raises(awa.ValidationError, match="NUL"):
        await client.insert({"body": f"x{NUL}y"}, kind="send")
    assert db.execute("SELECT count(*) AS n FROM awa.jobs").fetchone()["n"] == 0
    job = await client.insert({"body": "a literal \\u0000 stays text"}, kind="send")
    row = db.execute("SELECT args->>'body' AS body FROM awa.jobs WHERE id = %s",
                     (job.id,)).fetchone()
    assert row["body"] == "a literal \\u0000 stays text"


async def test_a_misspelt_insert_keyword_is_refused_with_the_call_s_name(client, db,
                                                                        database_url):
    """The keywords are declared once (``InsertKeywords``); a typo still fails as a Python
    signature would, naming the call, and writes nothing."""
    args = {"to": "a@example.com"}
    calls = {"insert": lambda **kw: client.insert(args, **kw),
             "insert_many": lambda **kw: client.insert_many([args], **kw),
             "insert_many_copy": lambda **kw: client.insert_many_copy([args], **kw),
             "enqueue_many_copy": lambda **kw: client.enqueue_many_copy([args], **kw),
             "insert_job": lambda **kw: awa.bridge.insert_job(aconn, args, **kw)}
    aconn = await psycopg.AsyncConnection.connect(database_url)
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword "
                                            r"argument 'queu'$"):
            await call(kind="send", queu="email")
    with pytest.raises(TypeError, match=r"^insert_job_sync\(\) .* 'priorty'$"):
        awa.bridge.insert_job_sync(db, args, kind="send", priorty=2)
    async with await client.transaction() as tx:
        with pytest.raises(TypeError, match=r"^insert_many\(\) .* 'queu'$"):
            await tx.insert_many([args], kind="send", queu="email")
    await aconn.close()
    assert db.execute("SELECT count(*) AS n FROM awa.jobs").fetchone()["n"] == 0


async def test_admin_queue_operations_validate_the_name(client, db):
    long_name = "q" * 70
    for action in (client.pause_queue, client.resume_queue, client.drain_queue):
        with pytest.raises(awa.ValidationError, match="70 bytes"):
            await action(long_name)
    with pytest.raises(awa.ValidationError, match="NUL"):
        await client.list_jobs(queue=f"a{NUL}")
    assert db.execute("SELECT count(*) AS n FROM awa.queue_meta").fetchone()["n"] == 0


def test_cli_refuses_a_queue_name_that_cannot_be_a_channel(database_url, db):
    result = awa_cmd("queue", "pause", "q" * 70, "--database-url", database_url)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and "70 bytes" in lines[0], result.stderr
    assert db.execute("SELECT count(*) AS n FROM awa.queue_meta").fetchone()["n"] == 0


async def test_a_connection_the_server_ended_is_replaced_not_raised(client, db):
    """Backends terminated under the pool: the next producer call works (the pool checks)."""
    await client.insert({"to": "a@example.com"}, kind="send")
    # Waits until each backend is gone (its goodbye is on the socket): a call that races
    # the termination itself meets it mid-statement, as with any pool.
    db.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
               "WHERE datname = current_database() AND application_name = 'awa-worker'")
    count = await client.enqueue_many_copy([{"to": "b@example.com"}], kind="send")
    assert count == 1


async def test_driver_failures_reach_user_code_as_database_error(client, db):
    async with await client.transaction() as tx:
        with pytest.raises(awa.DatabaseError) as info:
            await tx.execute("SELECT * FROM no_such_table")
    assert isinstance(info.value.__cause__, Exception)
    assert "no_such_table" in str(info.value) and "\n" not in str(info.value)
