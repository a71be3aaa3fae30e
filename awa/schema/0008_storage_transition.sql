-- The live switch of storage engines, canonical -> queue storage (docs/production.md,
-- "Choosing and switching storage engines").  One row says where the database is:
--   canonical         canonical serves it (a database migrated for queue storage from the
--                     start reads as active: its layout names the engine);
--   prepared          `awa storage prepare` laid queue storage out; canonical still serves;
--   mixed_transition  new jobs go to queue storage; workers claim from both; canonical drains;
--   aborting          the way back: new jobs go to canonical; queue storage drains;
--   active            finalized: queue storage serves it, canonical holds no live job.
-- Only adds (architecture §5, "Releases that roll"): a release before this one never reads it.
CREATE TABLE IF NOT EXISTS awa.storage_transition (
    singleton        boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    state            text NOT NULL DEFAULT 'canonical'
                     CHECK (state IN ('canonical', 'prepared', 'mixed_transition', 'aborting',
                                      'active')),
    prepared_engine  text,
    prepared_schema  text,
    transition_epoch bigint NOT NULL DEFAULT 0,
    details          jsonb NOT NULL DEFAULT '{}'::jsonb,
    entered_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finalized_at     timestamptz
);
-- A database already served by queue storage starts active.
INSERT INTO awa.storage_transition (singleton, state, prepared_engine, prepared_schema,
                                    finalized_at)
SELECT true, CASE WHEN b.schema_name IS NULL THEN 'canonical' ELSE 'active' END,
       CASE WHEN b.schema_name IS NULL THEN NULL ELSE 'queue_storage' END, b.schema_name,
       CASE WHEN b.schema_name IS NULL THEN NULL ELSE now() END
  FROM (SELECT (SELECT schema_name FROM awa.runtime_storage_backends
                 WHERE backend = 'queue_storage') AS schema_name) b
ON CONFLICT (singleton) DO NOTHING;

-- The role a runtime of this release claims with during a transition (`start(...,
-- storage_transition_role=)`: auto, canonical_drain, queue_storage_target).  NULL: a runtime
-- of an older release, which knows nothing of the transition.
ALTER TABLE awa.runtime_instances ADD COLUMN IF NOT EXISTS transition_role text;
