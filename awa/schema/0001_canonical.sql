-- 0001: the canonical storage engine (docs/architecture.md §6).
-- Idempotent: every object is created only when missing.

CREATE SCHEMA IF NOT EXISTS awa;

DO $$ BEGIN
    CREATE TYPE awa.job_state AS ENUM (
        'scheduled', 'available', 'running', 'completed',
        'retryable', 'failed', 'cancelled', 'waiting_external'
    );
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- Bit position of a state inside a unique_states bit(8) mask (0 = leftmost).
CREATE OR REPLACE FUNCTION awa.state_bit(s awa.job_state) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_position(enum_range(NULL::awa.job_state), s) - 1
$$;

CREATE SEQUENCE IF NOT EXISTS awa.jobs_id_seq;

CREATE TABLE IF NOT EXISTS awa.jobs_hot (
    id                   bigint PRIMARY KEY DEFAULT nextval('awa.jobs_id_seq'),
    kind                 text NOT NULL,
    queue                text NOT NULL DEFAULT 'default',
    args                 jsonb NOT NULL DEFAULT '{}'::jsonb,
    state                awa.job_state NOT NULL DEFAULT 'available',
    priority             smallint NOT NULL DEFAULT 2,
    attempt              smallint NOT NULL DEFAULT 0,
    max_attempts         smallint NOT NULL DEFAULT 25,
    run_at               timestamptz NOT NULL DEFAULT now(),
    heartbeat_at         timestamptz,
    deadline_at          timestamptz,
    attempted_at         timestamptz,
    finalized_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    errors               jsonb[],
    metadata             jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags                 text[] NOT NULL DEFAULT '{}',
    unique_key           bytea,
    unique_states        bit(8),
    callback_id          uuid,
    callback_timeout_at  timestamptz,
    callback_filter      text,
    callback_on_complete text,
    callback_on_fail     text,
    callback_transform   text,
    run_lease            bigint NOT NULL DEFAULT 0,
    progress             jsonb,
    CONSTRAINT jobs_hot_priority_check CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT jobs_hot_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT jobs_hot_state_check CHECK (state NOT IN ('scheduled', 'retryable'))
);

-- Deferred work (scheduled, retryable) lives apart so the hot table's claim
-- index only ever sees runnable rows.
CREATE TABLE IF NOT EXISTS awa.scheduled_jobs (
    LIKE awa.jobs_hot INCLUDING DEFAULTS,
    PRIMARY KEY (id),
    CONSTRAINT scheduled_jobs_priority_check CHECK (priority BETWEEN 1 AND 4),
    CONSTRAINT scheduled_jobs_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT scheduled_jobs_state_check CHECK (state IN ('scheduled', 'retryable'))
);

-- Claim path: runnable rows of a queue in dispatch order.
CREATE INDEX IF NOT EXISTS idx_jobs_hot_claim
    ON awa.jobs_hot (queue, priority, run_at, id) WHERE state = 'available';
-- Rescue and ops: running attempts by heartbeat and deadline.
CREATE INDEX IF NOT EXISTS idx_jobs_hot_running_heartbeat
    ON awa.jobs_hot (heartbeat_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS idx_jobs_hot_running_deadline
    ON awa.jobs_hot (deadline_at) WHERE state = 'running';
-- Callback resolution and callback-timeout rescue.
CREATE UNIQUE INDEX IF NOT EXISTS idx_jobs_hot_callback_id
    ON awa.jobs_hot (callback_id) WHERE callback_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_jobs_hot_callback_timeout
    ON awa.jobs_hot (callback_timeout_at) WHERE state = 'waiting_external';
-- Listing and stats: by state then queue; by kind; by finalization time.
CREATE INDEX IF NOT EXISTS idx_jobs_hot_state_queue
    ON awa.jobs_hot (state, queue, id);
CREATE INDEX IF NOT EXISTS idx_jobs_hot_kind_state
    ON awa.jobs_hot (kind, state);
CREATE INDEX IF NOT EXISTS idx_jobs_hot_finalized
    ON awa.jobs_hot (state, queue, finalized_at) WHERE finalized_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_jobs_hot_unique_key
    ON awa.jobs_hot (unique_key) WHERE unique_key IS NOT NULL;

CREATE INDEX IF NOT EXISTS idx_scheduled_jobs_run_at
    ON awa.scheduled_jobs (run_at, id);
CREATE INDEX IF NOT EXISTS idx_scheduled_jobs_state_queue
    ON awa.scheduled_jobs (state, queue, id);
CREATE INDEX IF NOT EXISTS idx_scheduled_jobs_kind_state
    ON awa.scheduled_jobs (kind, state);
CREATE INDEX IF NOT EXISTS idx_scheduled_jobs_unique_key
    ON awa.scheduled_jobs (unique_key) WHERE unique_key IS NOT NULL;

-- The operator read surface.
CREATE OR REPLACE VIEW awa.jobs AS
    SELECT * FROM awa.jobs_hot
    UNION ALL
    SELECT * FROM awa.scheduled_jobs;

-- Uniqueness: one claim row per key, the single source of truth.
CREATE TABLE IF NOT EXISTS awa.job_unique_claims (
    unique_key bytea NOT NULL,
    job_id     bigint NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_awa_jobs_unique ON awa.job_unique_claims (unique_key);
CREATE INDEX IF NOT EXISTS idx_job_unique_claims_job ON awa.job_unique_claims (job_id);

-- A row entering a state of its mask takes the claim (raising
-- unique_violation on idx_awa_jobs_unique when another job holds it); a row
-- leaving the mask, or leaving the table, gives it back.
CREATE OR REPLACE FUNCTION awa.sync_unique_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.unique_key IS NOT NULL THEN
        IF TG_OP = 'DELETE'
           OR NEW.unique_key IS DISTINCT FROM OLD.unique_key
           OR get_bit(COALESCE(NEW.unique_states, B'00000000'), awa.state_bit(NEW.state)) = 0 THEN
            DELETE FROM awa.job_unique_claims
             WHERE unique_key = OLD.unique_key AND job_id = OLD.id;
        END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.unique_key IS NOT NULL
       AND get_bit(COALESCE(NEW.unique_states, B'00000000'), awa.state_bit(NEW.state)) = 1 THEN
        INSERT INTO awa.job_unique_claims (unique_key, job_id)
        SELECT NEW.unique_key, NEW.id
         WHERE NOT EXISTS (
            SELECT 1 FROM awa.job_unique_claims
             WHERE unique_key = NEW.unique_key AND job_id = NEW.id);
    END IF;
    RETURN NULL;
END $$;

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['jobs_hot', 'scheduled_jobs'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'awa_unique_claim_ins'
                        AND tgrelid = ('awa.' || t)::regclass) THEN
            EXECUTE format('CREATE TRIGGER awa_unique_claim_ins AFTER INSERT ON awa.%I
                FOR EACH ROW WHEN (NEW.unique_key IS NOT NULL)
                EXECUTE FUNCTION awa.sync_unique_claim()', t);
            EXECUTE format('CREATE TRIGGER awa_unique_claim_upd AFTER UPDATE OF state, unique_key ON awa.%I
                FOR EACH ROW WHEN (NEW.unique_key IS NOT NULL OR OLD.unique_key IS NOT NULL)
                EXECUTE FUNCTION awa.sync_unique_claim()', t);
            EXECUTE format('CREATE TRIGGER awa_unique_claim_del AFTER DELETE ON awa.%I
                FOR EACH ROW WHEN (OLD.unique_key IS NOT NULL)
                EXECUTE FUNCTION awa.sync_unique_claim()', t);
        END IF;
    END LOOP;
END $$;

-- Wake the queue's dispatchers at commit for every statement that makes
-- rows available (insert, COPY, promotion), whichever connection wrote them.
CREATE OR REPLACE FUNCTION awa.notify_available() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM new_rows WHERE state = 'available' LOOP
        PERFORM pg_notify('awa:' || q, '');
    END LOOP;
    RETURN NULL;
END $$;

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'awa_notify_available'
                    AND tgrelid = 'awa.jobs_hot'::regclass) THEN
        CREATE TRIGGER awa_notify_available AFTER INSERT ON awa.jobs_hot
            REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION awa.notify_available();
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS awa.queue_meta (
    queue          text PRIMARY KEY,
    paused         boolean NOT NULL DEFAULT false,
    paused_at      timestamptz,
    paused_by      text,
    enqueue_shards smallint NOT NULL DEFAULT 1
);

CREATE TABLE IF NOT EXISTS awa.runtime_instances (
    instance_id          uuid PRIMARY KEY,
    hostname             text,
    pid                  integer,
    version              text,
    started_at           timestamptz NOT NULL DEFAULT now(),
    last_seen_at         timestamptz NOT NULL DEFAULT now(),
    snapshot_interval_ms integer NOT NULL DEFAULT 10000,
    healthy              boolean NOT NULL DEFAULT true,
    postgres_connected   boolean NOT NULL DEFAULT true,
    poll_loop_alive      boolean NOT NULL DEFAULT true,
    heartbeat_alive      boolean NOT NULL DEFAULT true,
    maintenance_alive    boolean NOT NULL DEFAULT false,
    leader               boolean NOT NULL DEFAULT false,
    shutting_down        boolean NOT NULL DEFAULT false,
    global_max_workers   integer,
    queues               jsonb NOT NULL DEFAULT '[]'::jsonb,
    descriptor_hashes    jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX IF NOT EXISTS idx_runtime_instances_last_seen
    ON awa.runtime_instances (last_seen_at);

CREATE TABLE IF NOT EXISTS awa.dlq_entries (
    job_id               bigint PRIMARY KEY,
    kind                 text NOT NULL,
    queue                text NOT NULL,
    args                 jsonb NOT NULL DEFAULT '{}'::jsonb,
    state                awa.job_state NOT NULL DEFAULT 'failed',
    priority             smallint NOT NULL DEFAULT 2,
    attempt              smallint NOT NULL DEFAULT 0,
    max_attempts         smallint NOT NULL DEFAULT 25,
    run_at               timestamptz NOT NULL DEFAULT now(),
    heartbeat_at         timestamptz,
    deadline_at          timestamptz,
    attempted_at         timestamptz,
    finalized_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    errors               jsonb[],
    metadata             jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags                 text[] NOT NULL DEFAULT '{}',
    unique_key           bytea,
    unique_states        bit(8),
    callback_id          uuid,
    callback_timeout_at  timestamptz,
    callback_filter      text,
    callback_on_complete text,
    callback_on_fail     text,
    callback_transform   text,
    run_lease            bigint NOT NULL DEFAULT 0,
    progress             jsonb,
    dlq_reason           text NOT NULL,
    dlq_at               timestamptz NOT NULL DEFAULT now(),
    original_run_lease   bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_dlq_entries_queue ON awa.dlq_entries (queue, dlq_at);
CREATE INDEX IF NOT EXISTS idx_dlq_entries_kind ON awa.dlq_entries (kind, dlq_at);
CREATE INDEX IF NOT EXISTS idx_dlq_entries_dlq_at ON awa.dlq_entries (dlq_at);

CREATE TABLE IF NOT EXISTS awa.cron_jobs (
    name               text PRIMARY KEY,
    cron_expr          text NOT NULL,
    timezone           text NOT NULL DEFAULT 'UTC',
    kind               text NOT NULL,
    queue              text NOT NULL DEFAULT 'default',
    args               jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority           smallint NOT NULL DEFAULT 2,
    max_attempts       smallint NOT NULL DEFAULT 25,
    tags               text[] NOT NULL DEFAULT '{}',
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
    missed_fire_policy text NOT NULL DEFAULT 'coalesce',
    last_enqueued_at   timestamptz,
    paused_at          timestamptz,
    paused_by          text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT cron_jobs_missed_fire_policy_check
        CHECK (missed_fire_policy IN ('coalesce', 'catch_up'))
);

CREATE TABLE IF NOT EXISTS awa.queue_descriptors (
    queue           text PRIMARY KEY,
    display_name    text,
    description     text,
    owner           text,
    docs_url        text,
    tags            text[] NOT NULL DEFAULT '{}',
    extra           jsonb NOT NULL DEFAULT '{}'::jsonb,
    descriptor_hash text NOT NULL,
    last_seen_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS awa.job_kind_descriptors (
    kind            text PRIMARY KEY,
    display_name    text,
    description     text,
    owner           text,
    docs_url        text,
    tags            text[] NOT NULL DEFAULT '{}',
    extra           jsonb NOT NULL DEFAULT '{}'::jsonb,
    descriptor_hash text NOT NULL,
    last_seen_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS awa.runtime_storage_backends (
    backend     text PRIMARY KEY,
    schema_name text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO awa.runtime_storage_backends (backend, schema_name)
VALUES ('canonical', 'awa')
ON CONFLICT (backend) DO NOTHING;
