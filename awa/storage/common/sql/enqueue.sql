-- The engine-neutral part of enqueue (awa/storage/common/enqueue.py): the staging table of
-- COPY and the unique-holder lookup.  A statement starts at a "-- name: <name>" line
-- (awa.statements.named_statements reads them).

-- --- COPY's staging table (canonical's bulk path) ------------------------------------------

-- name: create_staging
-- A per-session staging table, emptied at commit.
CREATE TEMP TABLE IF NOT EXISTS awa_enqueue_staging (
    ord           bigint,
    kind          text,
    queue         text,
    args          jsonb,
    priority      smallint,
    max_attempts  smallint,
    run_at        timestamptz,
    metadata      jsonb,
    tags          text[],
    unique_key    bytea,
    unique_states bit(8)
) ON COMMIT DELETE ROWS

-- name: empty_staging
-- A multi-chunk write is one transaction, so each chunk empties the table first (TRUNCATE
-- of a temp table: no other session sees it).
TRUNCATE pg_temp.awa_enqueue_staging

-- name: copy_into_staging
-- Every inserted column after its ordinal (enqueue.copy_rows).
COPY pg_temp.awa_enqueue_staging (ord, kind, queue, args, priority, max_attempts, run_at,
                                  metadata, tags, unique_key, unique_states) FROM STDIN

-- --- uniqueness ----------------------------------------------------------------------------

-- name: unique_holder
-- Who holds a unique key, with its state (None once the job is gone).
SELECT c.job_id, j.state
  FROM awa.job_unique_claims c
  LEFT JOIN awa.jobs j ON j.id = c.job_id
 WHERE c.unique_key = %s
