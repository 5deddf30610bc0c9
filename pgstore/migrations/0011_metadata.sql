-- 0011_metadata: the metadata of deliveries and outbox entries.
--
-- A small string map that travels with an item beside its payload (a
-- trace context, a tenant), stored as a jsonb object: written by the
-- enqueue that creates the row and never by an UPDATE, since no
-- transition changes it. NULL when an item has none, which is every row
-- this migration finds: a column without a default is added to the
-- catalog alone, with no rewrite of the table and no index.

ALTER TABLE {schema}.deliveries ADD COLUMN metadata jsonb;
ALTER TABLE {schema}.outbox_entries ADD COLUMN metadata jsonb;
