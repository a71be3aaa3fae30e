-- Every queue with a queue_meta row (a queue without one runs with the default 1).
SELECT queue, enqueue_shards, paused FROM awa.queue_meta ORDER BY queue;
