-- Durable batch operations (set_priority, move_queue over a filter), as the Rust-core awa's
-- migration v029: the operation, its progress, and one item per matched job.  The
-- maintenance leader runs them in bounded chunks; each chunk changes its jobs and records
-- their outcomes in one transaction, so a crash resumes where it stopped.
CREATE TABLE IF NOT EXISTS awa.batch_operations (
    id              uuid PRIMARY KEY,
    op_kind         text NOT NULL CHECK (op_kind IN ('set_priority', 'move_queue')),
    filter          jsonb NOT NULL DEFAULT '{}'::jsonb,
    spec            jsonb NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'scanning', 'running', 'cancelling',
                                     'completed', 'cancelled', 'failed')),
    submitted_by    text,
    submitted_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at      timestamptz,
    finalized_at    timestamptz,
    cursor          jsonb,
    total_matched   bigint,
    processed       bigint NOT NULL DEFAULT 0,
    skipped         bigint NOT NULL DEFAULT 0,
    errored         bigint NOT NULL DEFAULT 0,
    last_error      text,
    runner_instance uuid,
    retention_until timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS idx_batch_operations_state
    ON awa.batch_operations (state, submitted_at);
CREATE INDEX IF NOT EXISTS idx_batch_operations_retention
    ON awa.batch_operations (retention_until) WHERE retention_until IS NOT NULL;

CREATE TABLE IF NOT EXISTS awa.batch_operation_items (
    operation_id uuid NOT NULL REFERENCES awa.batch_operations (id) ON DELETE CASCADE,
    job_id       bigint NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'processed', 'skipped', 'errored')),
    error        text,
    processed_at timestamptz,
    PRIMARY KEY (operation_id, job_id)
);
CREATE INDEX IF NOT EXISTS idx_batch_operation_items_pending
    ON awa.batch_operation_items (operation_id, job_id) WHERE state = 'pending';
