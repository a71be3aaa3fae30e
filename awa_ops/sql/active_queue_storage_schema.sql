SELECT awa.active_queue_storage_schema();
