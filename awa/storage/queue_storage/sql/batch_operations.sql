-- Queue storage: the batch-operations group's statements
-- (awa/storage/queue_storage/batch_operations.py), by name.  A statement starts at a
-- "-- name: <name>" line (awa.statements.named_statements reads them); the layout's objects
-- are spelled awa.<name> and moved by schema.in_schema.
-- Not here yet: the change itself (CHANGE_DEFERRED, READY_CANDIDATES, MOVE_READY), which
-- shares its target and metadata rules and appends to a lane through enqueue.py's
-- APPEND_READY.

-- name: settle_source_lanes
-- Still under the source lanes' locks, after the move: each lane's claim head past the
-- entries just tombstoned (awa.qs_settle_lane, the maintenance leader's settle, one lane).
-- Else, where no claim ran meanwhile (a paused queue, workers busy elsewhere), every claim
-- of the queue would walk the moved entries until the leader settles: measured, a lane of
-- 50,000 moved entries made each claim of its queue take 326 ms instead of 0.6 ms.  Here
-- the walk covers only this chunk's entries.
SELECT awa.qs_settle_lane(l.queue, l.priority, l.shard)
  FROM unnest(%(queues)s::text[], %(priorities)s::smallint[], %(shards)s::smallint[])
       AS l(queue, priority, shard)

-- name: async_commit
-- The source lanes stay locked until the chunk commits, and their claims wait for them:
-- so, as the claim itself does, the commit does not wait for its WAL to reach disk.  A
-- chunk a server crash took back took its item outcomes with it (one transaction; WAL
-- order also takes back every later claim of a moved entry): it is applied again.
SELECT set_config('synchronous_commit', 'off', true)

-- name: analyze_ready
-- Taken once per operation, when its scan ends.  A ready partition filled since its last
-- statistics (a fresh install, a ring slot reused) has no column statistics, and the
-- planner then walks the chunk's whole source lane (lane index, filtered by job id) instead
-- of probing the chunk's ids: on a fresh 30,000-job lane (EXPLAIN ANALYZE, 100 ids) the
-- move's live entries took 5.9 ms instead of 0.5 ms, READY_CANDIDATES 3.5 instead of 0.5,
-- growing with the lane -- with the lane locked, so every claim of the queue waits.
ANALYZE awa.ready_entries
