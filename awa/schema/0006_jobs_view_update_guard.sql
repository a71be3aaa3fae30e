-- Updates through the awa.jobs view apply only to the row they read.  Migration 0002's
-- trigger wrote the new image over the row by id alone: an UPDATE that read a job as
-- available and then waited for the row lock of a claim wrote `available` back over the
-- committed claim, and the job was claimed again with the same attempt.  Now each write
-- also matches the state and run lease the update read; when the row moved on meanwhile,
-- the update touches nothing (0 rows), as an UPDATE of a plain table re-checking its
-- WHERE clause would.
CREATE OR REPLACE FUNCTION awa.jobs_view_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    in_hot   boolean;
    to_hot   boolean := NEW.state NOT IN ('scheduled', 'retryable');
BEGIN
    SELECT true INTO in_hot FROM awa.jobs_hot WHERE id = OLD.id;
    in_hot := COALESCE(in_hot, false);
    IF NOT in_hot AND NOT EXISTS (SELECT 1 FROM awa.scheduled_jobs WHERE id = OLD.id) THEN
        RETURN NULL;
    END IF;
    IF in_hot AND to_hot THEN
        UPDATE awa.jobs_hot
           SET id = NEW.id,
               kind = NEW.kind,
               queue = NEW.queue,
               args = NEW.args,
               state = NEW.state,
               priority = NEW.priority,
               attempt = NEW.attempt,
               max_attempts = NEW.max_attempts,
               run_at = NEW.run_at,
               heartbeat_at = NEW.heartbeat_at,
               deadline_at = NEW.deadline_at,
               attempted_at = NEW.attempted_at,
               finalized_at = NEW.finalized_at,
               created_at = NEW.created_at,
               errors = NEW.errors,
               metadata = NEW.metadata,
               tags = NEW.tags,
               unique_key = NEW.unique_key,
               unique_states = NEW.unique_states,
               callback_id = NEW.callback_id,
               callback_timeout_at = NEW.callback_timeout_at,
               callback_filter = NEW.callback_filter,
               callback_on_complete = NEW.callback_on_complete,
               callback_on_fail = NEW.callback_on_fail,
               callback_transform = NEW.callback_transform,
               run_lease = NEW.run_lease,
               progress = NEW.progress
         WHERE id = OLD.id AND state = OLD.state AND run_lease = OLD.run_lease;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    ELSIF NOT in_hot AND NOT to_hot THEN
        UPDATE awa.scheduled_jobs
           SET id = NEW.id,
               kind = NEW.kind,
               queue = NEW.queue,
               args = NEW.args,
               state = NEW.state,
               priority = NEW.priority,
               attempt = NEW.attempt,
               max_attempts = NEW.max_attempts,
               run_at = NEW.run_at,
               heartbeat_at = NEW.heartbeat_at,
               deadline_at = NEW.deadline_at,
               attempted_at = NEW.attempted_at,
               finalized_at = NEW.finalized_at,
               created_at = NEW.created_at,
               errors = NEW.errors,
               metadata = NEW.metadata,
               tags = NEW.tags,
               unique_key = NEW.unique_key,
               unique_states = NEW.unique_states,
               callback_id = NEW.callback_id,
               callback_timeout_at = NEW.callback_timeout_at,
               callback_filter = NEW.callback_filter,
               callback_on_complete = NEW.callback_on_complete,
               callback_on_fail = NEW.callback_on_fail,
               callback_transform = NEW.callback_transform,
               run_lease = NEW.run_lease,
               progress = NEW.progress
         WHERE id = OLD.id AND state = OLD.state AND run_lease = OLD.run_lease;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    ELSIF in_hot THEN
        DELETE FROM awa.jobs_hot WHERE id = OLD.id AND state = OLD.state AND run_lease = OLD.run_lease;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        INSERT INTO awa.scheduled_jobs (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
        VALUES (NEW.id, NEW.kind, NEW.queue, NEW.args, NEW.state, NEW.priority, NEW.attempt, NEW.max_attempts, NEW.run_at, NEW.heartbeat_at, NEW.deadline_at, NEW.attempted_at, NEW.finalized_at, NEW.created_at, NEW.errors, NEW.metadata, NEW.tags, NEW.unique_key, NEW.unique_states, NEW.callback_id, NEW.callback_timeout_at, NEW.callback_filter, NEW.callback_on_complete, NEW.callback_on_fail, NEW.callback_transform, NEW.run_lease, NEW.progress);
    ELSE
        DELETE FROM awa.scheduled_jobs WHERE id = OLD.id AND state = OLD.state AND run_lease = OLD.run_lease;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        INSERT INTO awa.jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at, created_at, errors, metadata, tags, unique_key, unique_states, callback_id, callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail, callback_transform, run_lease, progress)
        VALUES (NEW.id, NEW.kind, NEW.queue, NEW.args, NEW.state, NEW.priority, NEW.attempt, NEW.max_attempts, NEW.run_at, NEW.heartbeat_at, NEW.deadline_at, NEW.attempted_at, NEW.finalized_at, NEW.created_at, NEW.errors, NEW.metadata, NEW.tags, NEW.unique_key, NEW.unique_states, NEW.callback_id, NEW.callback_timeout_at, NEW.callback_filter, NEW.callback_on_complete, NEW.callback_on_fail, NEW.callback_transform, NEW.run_lease, NEW.progress);
    END IF;
    RETURN NEW;
END $$;
