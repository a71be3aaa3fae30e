-- Which awa objects exist (engine detection, awa_ops/storage.py).
SELECT
    to_regnamespace('awa') IS NOT NULL AND to_regclass('awa.runtime_instances') IS NOT NULL
        AS has_control_schema,
    to_regclass('awa.runtime_storage_backends') IS NOT NULL AS has_backends,
    to_regprocedure('awa.active_queue_storage_schema()') IS NOT NULL AS has_active_fn,
    to_regprocedure('awa.storage_status()') IS NOT NULL AS has_storage_status,
    to_regclass('awa.schema_version') IS NOT NULL AS has_schema_version
