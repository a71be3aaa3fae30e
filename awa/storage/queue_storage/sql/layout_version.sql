-- Queue storage: the layout version, installed last, in the install's transaction: a layout
-- that has it is complete.  The number is ``awa.schema.layout.QUEUE_STORAGE_LAYOUT_VERSION``
-- (a test checks both say the same); raise both with every change to the layout or to a
-- function the engine calls.

CREATE OR REPLACE FUNCTION awa.qs_layout_version() RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT 10 $$;
