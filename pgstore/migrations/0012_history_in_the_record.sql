-- 0012_history_in_the_record: a record keeps its history in its own row.
--
-- A transition used to write its record and a row of delivery_history or
-- outbox_entry_history: a second heap tuple and a second index entry for
-- every claim, lease and completion, and in SQL a second table for the
-- statement to open. Now the UPDATE that writes the record appends the
-- transition's entry to the record's history column, a jsonb array of
-- entries in seq order, each itself an array:
--
--   [seq, op, from_state, to_state, outcome, actor, reason, at]
--
-- with JSON null for an empty from_state, actor or reason (as the history
-- tables store NULL), and at as an ISO 8601 timestamp. NULL stands for no
-- entries. The entry of a record's creation stays implied by the record
-- (migrations/0008). A record's row grows by one entry per transition,
-- so a record with dozens of transitions moves its history out of line
-- (TOAST) like any wide value.
--
-- The history tables stay, and History reads both: the entries written
-- before this migration (or by a build that predates it, during a
-- rolling upgrade) are rows there, and merge with the record's own by
-- seq. A purge deletes both. Neither column has a default, so adding it
-- rewrites nothing.

ALTER TABLE {schema}.deliveries ADD COLUMN history jsonb;
ALTER TABLE {schema}.outbox_entries ADD COLUMN history jsonb;
