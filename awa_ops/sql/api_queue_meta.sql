-- Queues known to awa.queue_meta (paused ones may have no job at all).
SELECT queue, paused, paused_at, paused_by FROM awa.queue_meta ORDER BY queue;
