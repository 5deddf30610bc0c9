-- 0004_purge_index: retention finds ended records by index.
--
-- PurgeDeliveries and PurgeEntries delete terminal records oldest
-- ended_at first, then id, a bounded batch at a time. ended_at is set
-- exactly when a record is terminal (the *_ended_check constraints), so
-- these partial indexes hold the history and nothing else: open records,
-- the work in hand, never enter them, and a purge reads its batch from
-- the front of the index instead of scanning the table.

CREATE INDEX deliveries_ended_idx ON {schema}.deliveries (ended_at, id)
    WHERE ended_at IS NOT NULL;

CREATE INDEX outbox_entries_ended_idx ON {schema}.outbox_entries (ended_at, id)
    WHERE ended_at IS NOT NULL;
