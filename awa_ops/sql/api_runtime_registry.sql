-- The runtime registry for the REST API's /api/runtime: every column, ages on the database clock.
SELECT instance_id, hostname, pid, version, started_at, last_seen_at, snapshot_interval_ms,
       healthy, postgres_connected, poll_loop_alive, heartbeat_alive, maintenance_alive, leader,
       shutting_down, global_max_workers, queues, descriptor_hashes,
       EXTRACT(EPOCH FROM (now() - last_seen_at))::float8 AS last_seen_age_s
  FROM awa.runtime_instances
 ORDER BY leader DESC, last_seen_at DESC
 LIMIT %(limit)s;
