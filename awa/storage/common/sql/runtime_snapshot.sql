-- The engine-neutral core: the runtime's snapshot row in awa.runtime_instances
-- (awa/storage/common/runtime_snapshot.py), written the same by every engine.  A statement
-- starts at a "-- name: <name>" line (awa.statements.named_statements reads them).

-- name: upsert_runtime_instance
-- A runtime's snapshot row: every snapshot interval, and at start and shutdown.
INSERT INTO awa.runtime_instances (
    instance_id, hostname, pid, version, started_at, last_seen_at, snapshot_interval_ms,
    healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive,
    leader, shutting_down, global_max_workers, queues, schema_version, layout_version)
VALUES (%s, %s, %s, %s, %s, now(), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (instance_id) DO UPDATE SET
    last_seen_at = now(),
    schema_version = EXCLUDED.schema_version,
    layout_version = EXCLUDED.layout_version,
    snapshot_interval_ms = EXCLUDED.snapshot_interval_ms,
    healthy = EXCLUDED.healthy,
    postgres_connected = EXCLUDED.postgres_connected,
    poll_loop_alive = EXCLUDED.poll_loop_alive,
    heartbeat_alive = EXCLUDED.heartbeat_alive,
    maintenance_alive = EXCLUDED.maintenance_alive,
    leader = EXCLUDED.leader,
    shutting_down = EXCLUDED.shutting_down,
    global_max_workers = EXCLUDED.global_max_workers,
    queues = EXCLUDED.queues
