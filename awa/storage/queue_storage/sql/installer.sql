-- Queue storage: what the installer sends besides the installed files
-- (awa/storage/queue_storage/schema.py), by name; not installed.
-- A statement starts at a "-- name: <name>" line (awa.statements.named_statements reads
-- them); the layout's objects are spelled awa.<name> and moved by schema.in_schema.
-- installed, record_install and record_contract each carry the same digest of the
-- functions, views and triggers in the control schema and the layout's: it changes when
-- anything (another release's `awa migrate`, a hand edit) replaced one of them.  Keep the
-- three alike (tests/storage/test_queue_storage_schema.py checks).

-- name: canonical_rows
-- Canonical rows present: installing would hide them behind the other engine.
SELECT EXISTS (SELECT 1 FROM awa.jobs_hot) OR EXISTS (SELECT 1 FROM awa.scheduled_jobs) AS busy

-- name: lock
SELECT pg_advisory_xact_lock(%s)

-- name: has_transition
SELECT to_regclass('awa.storage_transition') IS NOT NULL AS present

-- name: transition_underway
SELECT state IN ('prepared', 'mixed_transition', 'aborting') AS underway
  FROM awa.storage_transition

-- name: has_active_fn
SELECT to_regprocedure('awa.active_queue_storage_schema()') IS NOT NULL AS present

-- name: active_schema
SELECT awa.active_queue_storage_schema() AS schema_name

-- name: installed
-- What the last install left: its fingerprint (the script's digest, then the objects') and
-- the contract step's layout.
SELECT (SELECT fingerprint FROM awa.layout_installs WHERE engine = 'queue_storage') AS fingerprint,
       (SELECT contracted_layout FROM awa.layout_installs
         WHERE engine = 'queue_storage') AS contracted_layout,
       (
SELECT md5(string_agg(o, ',' ORDER BY o)) FROM (
    SELECT p.oid::regprocedure::text || md5(p.prosrc) AS o FROM pg_proc p
     WHERE p.pronamespace::regnamespace::text = ANY(%(schemas)s::text[])
    UNION ALL
    SELECT c.oid::regclass::text || md5(pg_get_viewdef(c.oid)) FROM pg_class c
     WHERE c.relnamespace::regnamespace::text = ANY(%(schemas)s::text[]) AND c.relkind = 'v'
    UNION ALL
    SELECT t.tgrelid::regclass::text || t.tgname || t.tgfoid::regprocedure::text
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace::regnamespace::text = ANY(%(schemas)s::text[]) AND NOT t.tgisinternal
) objects) AS objects

-- name: record_install
INSERT INTO awa.layout_installs (engine, fingerprint)
VALUES ('queue_storage', %(script)s || ':' || (
SELECT md5(string_agg(o, ',' ORDER BY o)) FROM (
    SELECT p.oid::regprocedure::text || md5(p.prosrc) AS o FROM pg_proc p
     WHERE p.pronamespace::regnamespace::text = ANY(%(schemas)s::text[])
    UNION ALL
    SELECT c.oid::regclass::text || md5(pg_get_viewdef(c.oid)) FROM pg_class c
     WHERE c.relnamespace::regnamespace::text = ANY(%(schemas)s::text[]) AND c.relkind = 'v'
    UNION ALL
    SELECT t.tgrelid::regclass::text || t.tgname || t.tgfoid::regprocedure::text
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace::regnamespace::text = ANY(%(schemas)s::text[]) AND NOT t.tgisinternal
) objects))
ON CONFLICT (engine) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, installed_at = now()

-- name: record_contract
-- The contract step's record: installs of this layout leave compat.sql out from now on.
INSERT INTO awa.layout_installs (engine, fingerprint, contracted_layout)
VALUES ('queue_storage', %(script)s || ':' || (
SELECT md5(string_agg(o, ',' ORDER BY o)) FROM (
    SELECT p.oid::regprocedure::text || md5(p.prosrc) AS o FROM pg_proc p
     WHERE p.pronamespace::regnamespace::text = ANY(%(schemas)s::text[])
    UNION ALL
    SELECT c.oid::regclass::text || md5(pg_get_viewdef(c.oid)) FROM pg_class c
     WHERE c.relnamespace::regnamespace::text = ANY(%(schemas)s::text[]) AND c.relkind = 'v'
    UNION ALL
    SELECT t.tgrelid::regclass::text || t.tgname || t.tgfoid::regprocedure::text
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace::regnamespace::text = ANY(%(schemas)s::text[]) AND NOT t.tgisinternal
) objects), %(layout)s)
ON CONFLICT (engine) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, contracted_layout = EXCLUDED.contracted_layout,
       installed_at = now()

-- name: compat_present
-- How many functions of the layout's schema contract.sql names (what it will drop).
SELECT count(*) AS n FROM unnest(%(signatures)s::text[]) s
 WHERE to_regprocedure(s) IS NOT NULL
