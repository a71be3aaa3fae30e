SELECT queue, enqueue_shards FROM awa.queue_meta WHERE queue = '<queue>';
