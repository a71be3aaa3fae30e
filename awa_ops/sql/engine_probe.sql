-- One round trip: which awa objects exist (engine detection, awa_ops/storage.py).
SELECT
    to_regnamespace('awa') IS NOT NULL AND to_regclass('awa.runtime_instances') IS NOT NULL
        AS has_control_schema,
    to_regclass('awa.runtime_storage_backends') IS NOT NULL AS has_backends,
    to_regprocedure('awa.active_queue_storage_schema()') IS NOT NULL AS has_active_fn,
    to_regprocedure('awa.storage_status()') IS NOT NULL AS has_storage_status,
    CASE WHEN to_regclass('awa.schema_version') IS NOT NULL
         THEN (xpath('/row/v/text()',
                     query_to_xml('SELECT max(version) AS v FROM awa.schema_version', false, true, '')))[1]::text::int
    END AS schema_version
