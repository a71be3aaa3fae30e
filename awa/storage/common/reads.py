"""The ops reads' pieces every engine shares (the statements on shared tables and on the
canonical tables, which queue storage reads too, empty on a database it laid out)."""

from __future__ import annotations

# The queues of ``{table}`` that completed a job within the last %(within)s seconds, for a
# table whose (state, queue, ...) index leads with the state and the queue and whose
# (state, queue, finalized_at) index answers "completed lately?": a loose index scan over
# its distinct completed queues (one probe each, the first %(limit)s by name), then one
# probe per queue for a completion inside the window (LIMIT 1 keeps it a probe: as a
# semi-join the planner reads every completion of the window instead).
RECENTLY_COMPLETED_IN = """
WITH RECURSIVE walk AS (
    (SELECT t.queue FROM {table} t WHERE t.state = 'completed' ORDER BY t.queue LIMIT 1)
    UNION ALL
    SELECT n.queue FROM walk p CROSS JOIN LATERAL (
        SELECT t.queue FROM {table} t WHERE t.state = 'completed' AND t.queue > p.queue
         ORDER BY t.queue LIMIT 1) n
)
SELECT w.queue FROM (SELECT queue FROM walk LIMIT %(limit)s) w
 CROSS JOIN LATERAL (
       SELECT 1 FROM {table} t
        WHERE t.state = 'completed' AND t.queue = w.queue
          AND t.finalized_at > now() - make_interval(secs => %(within)s)
        LIMIT 1) r"""
# The same on the canonical hot table (idx_jobs_hot_state_queue, idx_jobs_hot_finalized).
HOT_RECENTLY_COMPLETED = RECENTLY_COMPLETED_IN.format(table="awa.jobs_hot")
