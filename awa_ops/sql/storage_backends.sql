SELECT
    backend,
    schema_name,
    updated_at
FROM awa.runtime_storage_backends;
