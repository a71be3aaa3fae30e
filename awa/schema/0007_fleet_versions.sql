-- Versions in the fleet (expand/contract, docs/architecture.md "Releases that roll").
-- Each runtime records the schema version its code needs and, on queue storage, the layout
-- version it speaks, so `awa migrate --contract` can tell whether any live runtime still
-- calls what an older layout had.  A runtime of a release before this one writes neither
-- (NULL): it speaks an older layout.
ALTER TABLE awa.runtime_instances ADD COLUMN IF NOT EXISTS schema_version integer;
ALTER TABLE awa.runtime_instances ADD COLUMN IF NOT EXISTS layout_version integer;

-- What `awa migrate` installed last, per engine: the fingerprint of the script and of the
-- functions, views and triggers it left (an install of the same script over the same objects
-- is skipped, so a repeated migrate takes no lock; one another release changed is not), and the
-- layout version the contract step ran at (what compat.sql keeps for older runtimes is
-- left out of installs of that layout from then on).
CREATE TABLE IF NOT EXISTS awa.layout_installs (
    engine            text PRIMARY KEY,
    fingerprint       text NOT NULL,
    contracted_layout integer NOT NULL DEFAULT 0,
    installed_at      timestamptz NOT NULL DEFAULT now()
);
