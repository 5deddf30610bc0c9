-- 0008_claims_leave_the_queue: a claim takes its entry out of the index
-- that claims read, and an enqueue writes no history row.
--
-- Claims. A claim used to change no indexed column, so the claimed entry
-- kept its place in outbox_entries_pending_idx (and a claimed retry in
-- outbox_entries_scheduled_idx), and every claim read past every claim
-- still in force ahead of it: with a few workers holding batches of 100,
-- hundreds of rows per claim, growing with the workers. Now the indexes
-- the claims read hold only unclaimed entries (claim_token IS NULL is in
-- their predicates), and claims in force are indexed apart, by expiry:
-- a claim finds the unclaimed entries at the head of its index, and the
-- entries whose claim ran out through a range of the index of claims
-- that holds nothing else (see claimTemplate in query.go). The finds and
-- OutboxStats read both. A claim therefore writes an index entry into
-- outbox_entries_claimed_idx; what it no longer reads is worth more.
--
-- Histories. The creation of a record is implied by the record itself:
-- an enqueue made with history on sets creation_implied and writes no
-- history row for it, and History answers the entry from the record's
-- created_at (see impliedCreation in history.go). Records already stored
-- keep their rows, and default to false.
--
-- pgstore:no-transaction
--
-- The indexes are built concurrently, so that writers go on while they
-- are built beside a large table; the column has a constant default, so
-- adding it rewrites nothing.

CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_entries_unclaimed_idx ON {schema}.outbox_entries (created_at, enqueue_seq)
    WHERE status = 'pending' AND claim_token IS NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_entries_unclaimed_due_idx ON {schema}.outbox_entries (next_attempt_at, id)
    WHERE status IN ('retry_scheduled', 'deferred') AND claim_token IS NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_entries_claimed_idx ON {schema}.outbox_entries (claim_expires_at)
    WHERE claim_token IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS {schema}.outbox_entries_pending_idx;
DROP INDEX CONCURRENTLY IF EXISTS {schema}.outbox_entries_scheduled_idx;

ALTER TABLE {schema}.deliveries ADD COLUMN IF NOT EXISTS creation_implied boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.outbox_entries ADD COLUMN IF NOT EXISTS creation_implied boolean NOT NULL DEFAULT false;
