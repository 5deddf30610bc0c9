-- 0014_no_statistics_on_bodies: ANALYZE skips the columns no statement
-- filters, joins, groups or orders on: a record's history, payload and
-- metadata.
--
-- Autovacuum analyzes a busy queue table often: every time a tenth of
-- its rows changed, which a queue does in seconds. Each ANALYZE samples
-- up to 30,000 rows and, for every column with statistics, sorts the
-- sample's values. The history column is the widest (an array of
-- entries that grows with every transition, and moves out of line once
-- it is long, so sampling it also reads TOAST), and jsonb values compare
-- slowly: on deliveries of 34,000 rows the history took about half of
-- each ANALYZE (390 to 455 ms, against 200 to 270 ms without its
-- statistics). The planner has no use for them: no statement puts these
-- columns in a condition, and their width estimates fall back to the
-- type's, which changes no plan of the hot statements (explain_test).
--
-- SET STATISTICS takes a lock that lets readers and writers go on (only
-- VACUUM, ANALYZE and other schema changes of the table wait), and
-- rewrites nothing. Statistics already gathered for these columns stay
-- as they were (ANALYZE no longer updates them, and removing them takes
-- a superuser); the planner reads only their width.

ALTER TABLE {schema}.deliveries ALTER COLUMN history SET STATISTICS 0;
ALTER TABLE {schema}.deliveries ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE {schema}.deliveries ALTER COLUMN metadata SET STATISTICS 0;
ALTER TABLE {schema}.outbox_entries ALTER COLUMN history SET STATISTICS 0;
ALTER TABLE {schema}.outbox_entries ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE {schema}.outbox_entries ALTER COLUMN metadata SET STATISTICS 0;
