-- 0010_redrive: a record redriven names the record it was redriven as,
-- and that record names it.
--
-- Redrive (ledger.Redriver, ledger.OutboxRedriver) sends a record that
-- ended badly again as a new open record and leaves the original as it
-- ended. redriven_to is set on the original, exactly once, by the
-- transaction that inserts the new record, whose redriven_from names the
-- original; both are NULL for every row this migration finds. They are
-- read with the record and never searched on: no index.
--
-- The columns are nullable with no default, so adding them rewrites
-- nothing. The CHECK constraints mirror the state machine (only a record
-- that ended badly is ever redriven) and are added NOT VALID: rows already
-- stored, all NULL, are not scanned, and every row written from now on is
-- checked.

ALTER TABLE {schema}.deliveries ADD COLUMN redriven_from text COLLATE "C";
ALTER TABLE {schema}.deliveries ADD COLUMN redriven_to text COLLATE "C";
ALTER TABLE {schema}.deliveries ADD CONSTRAINT deliveries_redriven_check
    CHECK (redriven_to IS NULL OR state IN ('failed', 'expired')) NOT VALID;

ALTER TABLE {schema}.outbox_entries ADD COLUMN redriven_from text COLLATE "C";
ALTER TABLE {schema}.outbox_entries ADD COLUMN redriven_to text COLLATE "C";
ALTER TABLE {schema}.outbox_entries ADD CONSTRAINT outbox_entries_redriven_check
    CHECK (redriven_to IS NULL OR status IN ('failed', 'dead_lettered')) NOT VALID;
