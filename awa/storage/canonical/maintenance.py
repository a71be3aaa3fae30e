"""SQL of the maintenance leader on the canonical engine, as named constants.

Moves between ``awa.jobs_hot`` and ``awa.scheduled_jobs`` (and into
``awa.dlq_entries``) are one ``DELETE ... RETURNING`` feeding an ``INSERT`` in
the same statement, keeping the job's id.  Batches travel as ``unnest``
arrays so a whole batch is one statement.  The column lists (and the shared
shapes of the retention deletes and descriptor upserts) are composed once, at
import, from fixed table and column names -- never from input.
"""

from __future__ import annotations

from awa.job import JOB_COLUMNS

_COLUMNS = ", ".join(JOB_COLUMNS)


def _select_list(source: str, overrides: dict[str, str]) -> str:
    """``source.col`` for every job column, with some replaced by expressions."""
    return ", ".join(overrides.get(c, f"{source}.{c}") for c in JOB_COLUMNS)


# --- leader election ---------------------------------------------------------
TRY_LEADER_LOCK = "SELECT pg_try_advisory_lock(%(key)s) AS acquired"
RELEASE_LEADER_LOCK = "SELECT pg_advisory_unlock(%(key)s) AS released"
LEADER_PING = "SELECT 1"

# --- rescue ----------------------------------------------------------------------
# Candidates are locked for the rest of the transaction, then one apply
# statement moves them all.  SKIP LOCKED: rows a completion is writing right
# now are simply left for the next tick.
def _rescue_candidates(state: str, expired: str, oldest_first_by: str) -> str:
    """Lock up to a batch of ``state`` attempts for which ``expired`` holds."""
    return f"""
SELECT id, run_lease, kind, queue, attempt, max_attempts
  FROM awa.jobs_hot
 WHERE state = '{state}'
   AND {expired}
 ORDER BY {oldest_first_by}
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
"""


SELECT_STALE_HEARTBEATS = _rescue_candidates(
    "running", "heartbeat_at < now() - make_interval(secs => %(staleness_s)s)", "heartbeat_at")
SELECT_EXPIRED_DEADLINES = _rescue_candidates("running", "deadline_at < now()", "deadline_at")
SELECT_EXPIRED_CALLBACKS = _rescue_candidates(
    "waiting_external", "callback_timeout_at < now()", "callback_timeout_at")

_RESCUE_INPUT = """
WITH input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(actions)s::text[],
                         %(backoffs)s::float8[], %(errors)s::jsonb[], %(dlq_reasons)s::text[])
        AS t(id, run_lease, action, backoff_s, error, dlq_reason)
)"""

# Every rescued attempt is guarded by (id, run_lease) and the state it was
# found in: a completion that won the race leaves nothing to rescue.
APPLY_RESCUE = _RESCUE_INPUT + f""",
retry_src AS (
    DELETE FROM awa.jobs_hot j USING input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'retry'
    RETURNING j.*, now() + make_interval(secs => i.backoff_s) AS new_run_at, i.error AS new_error
),
retried AS (
    INSERT INTO awa.scheduled_jobs ({_COLUMNS})
    SELECT {_select_list("r", {
        "state": "'retryable'::awa.job_state",
        "run_at": "r.new_run_at",
        "deadline_at": "NULL",
        "errors": "array_append(coalesce(r.errors, '{}'::jsonb[]), r.new_error)",
        "callback_id": "NULL",
        "callback_timeout_at": "NULL",
        "callback_filter": "NULL",
        "callback_on_complete": "NULL",
        "callback_on_fail": "NULL",
        "callback_transform": "NULL",
    })}
      FROM retry_src r
    RETURNING id, run_lease, kind, queue
),
failed AS (
    UPDATE awa.jobs_hot j
       SET state = 'failed', finalized_at = now(), deadline_at = NULL,
           callback_timeout_at = NULL,
           errors = array_append(coalesce(j.errors, '{{}}'::jsonb[]), i.error)
      FROM input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'fail'
    RETURNING j.id, j.run_lease, j.kind, j.queue
),
dlq_src AS (
    DELETE FROM awa.jobs_hot j USING input i
     WHERE j.id = i.id AND j.run_lease = i.run_lease AND j.state = %(state)s::awa.job_state
       AND i.action = 'dlq'
    RETURNING j.*, i.error AS new_error, i.dlq_reason AS new_dlq_reason
),
dead_lettered AS (
    INSERT INTO awa.dlq_entries (job_id, {", ".join(c for c in JOB_COLUMNS if c != "id")},
                                 dlq_reason, dlq_at, original_run_lease)
    SELECT {_select_list("d", {
        "state": "'failed'::awa.job_state",
        "finalized_at": "now()",
        "deadline_at": "NULL",
        "callback_timeout_at": "NULL",
        "errors": "array_append(coalesce(d.errors, '{}'::jsonb[]), d.new_error)",
    })}, d.new_dlq_reason, now(), d.run_lease
      FROM dlq_src d
    RETURNING job_id AS id, run_lease, kind, queue, dlq_reason
)
SELECT 'retry' AS action, id, run_lease, kind, queue, NULL::text AS dlq_reason FROM retried
UNION ALL
SELECT 'fail', id, run_lease, kind, queue, NULL FROM failed
UNION ALL
SELECT 'dlq', id, run_lease, kind, queue, dlq_reason FROM dead_lettered
"""

# The unique-claim wedge: the attempt's way back into a claiming state is
# taken by a newer holder of its key.  The old attempt becomes cancelled
# evidence (outside the default mask), the newer holder keeps the claim.
CANCEL_RUNNING_AS_DUPLICATE = """
UPDATE awa.jobs_hot
   SET state = 'cancelled', finalized_at = now(), deadline_at = NULL,
       callback_timeout_at = NULL,
       errors = array_append(coalesce(errors, '{}'::jsonb[]), %(error)s::jsonb)
 WHERE id = %(id)s AND run_lease = %(run_lease)s AND state = %(state)s::awa.job_state
RETURNING id, run_lease, kind, queue
"""

# --- promotion ----------------------------------------------------------------------
# Due deferred rows of unpaused queues become available; the insert trigger
# on jobs_hot sends NOTIFY "awa:<queue>" at commit.
PROMOTE_DUE = f"""
WITH due AS (
    SELECT s.id
      FROM awa.scheduled_jobs s
     WHERE s.run_at <= now()
       AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = s.queue AND m.paused)
     ORDER BY s.run_at, s.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
),
moved AS (
    DELETE FROM awa.scheduled_jobs s USING due WHERE s.id = due.id
    RETURNING s.*
),
promoted AS (
    INSERT INTO awa.jobs_hot ({_COLUMNS})
    SELECT {_select_list("moved", {"state": "'available'::awa.job_state"})}
      FROM moved
    RETURNING queue
)
SELECT queue, count(*) AS promoted FROM promoted GROUP BY queue
"""

# Row-at-a-time fallback after a unique collision in a promotion batch.
SELECT_DUE_IDS = """
SELECT s.id, s.attempt
  FROM awa.scheduled_jobs s
 WHERE s.run_at <= now()
   AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = s.queue AND m.paused)
 ORDER BY s.run_at, s.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
"""

PROMOTE_ONE = f"""
WITH moved AS (
    DELETE FROM awa.scheduled_jobs s WHERE s.id = %(id)s AND s.run_at <= now()
    RETURNING s.*
)
INSERT INTO awa.jobs_hot ({_COLUMNS})
SELECT {_select_list("moved", {"state": "'available'::awa.job_state"})}
  FROM moved
RETURNING id, queue
"""

CANCEL_DEFERRED_AS_DUPLICATE = f"""
WITH moved AS (
    DELETE FROM awa.scheduled_jobs s WHERE s.id = %(id)s
    RETURNING s.*
)
INSERT INTO awa.jobs_hot ({_COLUMNS})
SELECT {_select_list("moved", {
    "state": "'cancelled'::awa.job_state",
    "finalized_at": "now()",
    "errors": "array_append(coalesce(moved.errors, '{}'::jsonb[]), %(error)s::jsonb)",
})}
  FROM moved
RETURNING id, run_lease, kind, queue
"""

# --- retention ----------------------------------------------------------------------
# Each delete takes at most one batch; the caller loops a bounded number of
# times.  Per-queue overrides run as their own statements; the default
# statement skips the overridden queues.


def _delete_batch(table: str, key: str, condition: str, *, returning: str = "",
                  skip_locked: bool = True) -> str:
    """One bounded batch of ``table``'s rows matching ``condition``."""
    lock = "\n       FOR UPDATE SKIP LOCKED" if skip_locked else ""
    return f"""
DELETE FROM {table}
 WHERE {key} IN (
    SELECT {key} FROM {table}
     WHERE {condition}
     LIMIT %(limit)s{lock})
{returning}"""


_FINALIZED_AGED = ("state = %(state)s::awa.job_state"
                   " AND finalized_at < now() - make_interval(secs => %(age_s)s)")
_DLQ_AGED = "dlq_at < now() - make_interval(secs => %(age_s)s)"
_NOT_OVERRIDDEN = " AND queue <> ALL(%(excluded_queues)s::text[])"
_IN_QUEUE = " AND queue = %(queue)s"
_UNSEEN = "last_seen_at < now() - make_interval(secs => %(age_s)s)"

DELETE_FINALIZED_DEFAULT = _delete_batch("awa.jobs_hot", "id", _FINALIZED_AGED + _NOT_OVERRIDDEN)
DELETE_FINALIZED_QUEUE = _delete_batch("awa.jobs_hot", "id", _FINALIZED_AGED + _IN_QUEUE)
DELETE_DLQ_DEFAULT = _delete_batch("awa.dlq_entries", "job_id", _DLQ_AGED + _NOT_OVERRIDDEN,
                                   returning="RETURNING queue")
DELETE_DLQ_QUEUE = _delete_batch("awa.dlq_entries", "job_id", _DLQ_AGED + _IN_QUEUE,
                                 returning="RETURNING queue")
DELETE_UNSEEN_RUNTIMES = _delete_batch("awa.runtime_instances", "instance_id", _UNSEEN,
                                       skip_locked=False)
DELETE_UNSEEN_QUEUE_DESCRIPTORS = _delete_batch("awa.queue_descriptors", "queue", _UNSEEN,
                                                skip_locked=False)
DELETE_UNSEEN_KIND_DESCRIPTORS = _delete_batch("awa.job_kind_descriptors", "kind", _UNSEEN,
                                               skip_locked=False)

# --- priority aging -------------------------------------------------------------------
# A waiting job's effective priority is its original one minus one step per
# aging interval waited (1 is the most urgent).  The original is recorded in
# metadata the first time the job is aged, so aging is idempotent.
AGE_PRIORITIES = """
WITH settings AS (
    SELECT * FROM unnest(%(queues)s::text[], %(intervals_ms)s::bigint[]) AS t(queue, interval_ms)
),
waiting AS (
    SELECT j.id, j.priority,
           coalesce((j.metadata ->> %(meta_key)s)::int, j.priority) AS original,
           extract(epoch FROM now() - j.run_at) * 1000
               / nullif(coalesce(s.interval_ms, %(default_interval_ms)s::bigint), 0) AS steps
      FROM awa.jobs_hot j
      LEFT JOIN settings s ON s.queue = j.queue
     WHERE j.state = 'available'
       AND j.priority > 1
       AND j.run_at <= now() - make_interval(secs => %(min_interval_s)s)
),
aged AS (
    SELECT w.id, w.original, greatest(1, w.original - floor(w.steps)::int) AS new_priority
      FROM waiting w
     WHERE w.steps IS NOT NULL AND w.steps > 0
       AND greatest(1, w.original - floor(w.steps)::int) < w.priority
     LIMIT %(limit)s
),
locked AS (
    SELECT j.id FROM awa.jobs_hot j JOIN aged a USING (id)
     WHERE j.state = 'available'
       FOR UPDATE OF j SKIP LOCKED
)
UPDATE awa.jobs_hot j
   SET priority = a.new_priority,
       metadata = j.metadata || jsonb_build_object(%(meta_key)s::text, a.original)
  FROM aged a JOIN locked USING (id)
 WHERE j.id = a.id
RETURNING j.id
"""

# --- cron ----------------------------------------------------------------------------
SELECT_ACTIVE_CRON_JOBS = """
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
       metadata, missed_fire_policy, last_enqueued_at, created_at, now() AS db_now
  FROM awa.cron_jobs
 WHERE paused_at IS NULL
 ORDER BY name
"""

# Compare-and-set: only the evaluator that still sees the previous value
# advances the schedule, so a slot fires once even across leader failover.
ADVANCE_CRON_JOB = """
UPDATE awa.cron_jobs
   SET last_enqueued_at = %(slot)s, updated_at = now()
 WHERE name = %(name)s
   AND paused_at IS NULL
   AND last_enqueued_at IS NOT DISTINCT FROM %(previous)s
RETURNING name
"""

INSERT_CRON_RUNS = """
INSERT INTO awa.jobs_hot (kind, queue, args, state, priority, max_attempts, run_at,
                          metadata, tags)
SELECT %(kind)s, %(queue)s, %(args)s::jsonb, 'available', %(priority)s, %(max_attempts)s,
       slot, %(metadata)s::jsonb || jsonb_build_object('cron_name', %(name)s::text,
                                                       'cron_slot', slot),
       %(tags)s::text[]
  FROM unnest(%(slots)s::timestamptz[]) AS slot
RETURNING *
"""

UPSERT_CRON_JOBS = """
INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, args, priority,
                           max_attempts, tags, metadata, missed_fire_policy)
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags,
       metadata, missed_fire_policy
  FROM jsonb_to_recordset(%(schedules)s::jsonb) AS t(
       name text, cron_expr text, timezone text, kind text, queue text, args jsonb,
       priority smallint, max_attempts smallint, tags text[], metadata jsonb,
       missed_fire_policy text)
ON CONFLICT (name) DO UPDATE
   SET cron_expr = EXCLUDED.cron_expr, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
       queue = EXCLUDED.queue, args = EXCLUDED.args, priority = EXCLUDED.priority,
       max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags,
       metadata = EXCLUDED.metadata, missed_fire_policy = EXCLUDED.missed_fire_policy,
       updated_at = now()
 WHERE (awa.cron_jobs.cron_expr, awa.cron_jobs.timezone, awa.cron_jobs.kind,
        awa.cron_jobs.queue, awa.cron_jobs.args, awa.cron_jobs.priority,
        awa.cron_jobs.max_attempts, awa.cron_jobs.tags, awa.cron_jobs.metadata,
        awa.cron_jobs.missed_fire_policy)
       IS DISTINCT FROM
       (EXCLUDED.cron_expr, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.args,
        EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags, EXCLUDED.metadata,
        EXCLUDED.missed_fire_policy)
"""

LIST_CRON_JOBS = """
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs
 ORDER BY name
"""

GET_CRON_JOB = """
SELECT name, cron_expr, timezone, kind, queue, args, priority, max_attempts, tags, metadata,
       missed_fire_policy, last_enqueued_at, paused_at, paused_by, created_at, updated_at
  FROM awa.cron_jobs
 WHERE name = %(name)s
"""

DELETE_CRON_JOB = "DELETE FROM awa.cron_jobs WHERE name = %(name)s RETURNING name"

PAUSE_CRON_JOB = """
UPDATE awa.cron_jobs
   SET paused_at = coalesce(paused_at, now()), paused_by = %(paused_by)s, updated_at = now()
 WHERE name = %(name)s
RETURNING name
"""

RESUME_CRON_JOB = """
UPDATE awa.cron_jobs
   SET paused_at = NULL, paused_by = NULL, updated_at = now()
 WHERE name = %(name)s
RETURNING name
"""

# --- descriptors -------------------------------------------------------------------------


def _upsert_descriptors(table: str, key: str) -> str:
    """Insert or refresh the declared descriptors of one catalogue table."""
    return f"""
INSERT INTO {table} ({key}, display_name, description, owner, docs_url, tags,
    extra, descriptor_hash, last_seen_at)
SELECT name, display_name, description, owner, docs_url, coalesce(tags, '{{}}'),
       coalesce(extra, '{{}}'), descriptor_hash, now()
  FROM jsonb_to_recordset(%(descriptors)s::jsonb) AS t(name text, display_name text,
       description text, owner text, docs_url text, tags text[], extra jsonb,
       descriptor_hash text)
ON CONFLICT ({key}) DO UPDATE
   SET display_name = EXCLUDED.display_name, description = EXCLUDED.description,
       owner = EXCLUDED.owner, docs_url = EXCLUDED.docs_url, tags = EXCLUDED.tags,
       extra = EXCLUDED.extra, descriptor_hash = EXCLUDED.descriptor_hash,
       last_seen_at = now()
"""


UPSERT_QUEUE_DESCRIPTORS = _upsert_descriptors("awa.queue_descriptors", "queue")
UPSERT_KIND_DESCRIPTORS = _upsert_descriptors("awa.job_kind_descriptors", "kind")

# --- queue health -------------------------------------------------------------------------
# Index-only counts per (queue, state) of the non-finished states, plus the
# lag of each queue's oldest available job.
QUEUE_DEPTH = """
SELECT queue, state::text AS state, count(*) AS depth
  FROM awa.jobs_hot
 WHERE state IN ('available', 'running', 'waiting_external', 'failed')
 GROUP BY queue, state
UNION ALL
SELECT queue, state::text, count(*)
  FROM awa.scheduled_jobs
 GROUP BY queue, state
"""

QUEUE_LAG = """
SELECT queue, extract(epoch FROM now() - min(run_at))::float8 AS lag_s
  FROM awa.jobs_hot
 WHERE state = 'available'
 GROUP BY queue
"""

DLQ_DEPTH = """
SELECT queue, count(*) AS depth FROM awa.dlq_entries GROUP BY queue
"""

# --- cron admin ---------------------------------------------------------------------------
TRIGGER_CRON_JOB = """
INSERT INTO awa.jobs_hot (kind, queue, args, state, priority, max_attempts, metadata, tags)
SELECT kind, queue, args, 'available', priority, max_attempts,
       metadata || jsonb_build_object('cron_name', name, 'cron_triggered_at', now()), tags
  FROM awa.cron_jobs
 WHERE name = %(name)s
RETURNING *
"""

# Each runtime records the hashes of what it declares, so the ops layer can
# spot drift between runtimes (the snapshot upsert leaves this column alone).
SET_RUNTIME_DESCRIPTOR_HASHES = """
UPDATE awa.runtime_instances
   SET descriptor_hashes = %(hashes)s::jsonb
 WHERE instance_id = %(instance_id)s
   AND descriptor_hashes IS DISTINCT FROM %(hashes)s::jsonb
"""


class CanonicalMaintenance:
    """The maintenance group of the Engine protocol on the canonical engine."""
