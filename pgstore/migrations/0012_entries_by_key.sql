-- 0012_entries_by_key: find outbox entries by their idempotency key.
-- pgstore:no-transaction
--
-- The key is the name the business knows an entry by (an order number, a
-- message ID); an operator asks for it, not for the entry's UUID. The ID
-- is usually derived from the key, but a redriven entry's comes from its
-- new key and Save may keep a caller's own, so ListEntries and
-- RedriveEntriesMatching with an IdempotencyKey filter read this index
-- instead of the whole table. id follows the key so that a page by key
-- comes out of the index in ListEntries' order. Built concurrently: on a
-- running system outbox_entries is large and written all the time.

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_entries_key_idx
    ON {schema}.outbox_entries (idempotency_key, id);
