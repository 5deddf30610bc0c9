-- 0014_no_statistics_on_bodies, the form Migrate applies on Citus (see
-- ../0014_no_statistics_on_bodies.sql for why).
--
-- Citus refuses ALTER COLUMN ... SET STATISTICS on a table of a
-- distributed schema. So the coordinator's table takes it with DDL
-- propagation off for this transaction, and each shard of the table
-- (where ANALYZE samples the rows) takes it through
-- run_command_on_placements. Both are idempotent: a migration run again
-- after a failure sets the same targets.

SET LOCAL citus.enable_ddl_propagation TO off;

ALTER TABLE {schema}.deliveries ALTER COLUMN history SET STATISTICS 0;
ALTER TABLE {schema}.deliveries ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE {schema}.deliveries ALTER COLUMN metadata SET STATISTICS 0;
ALTER TABLE {schema}.outbox_entries ALTER COLUMN history SET STATISTICS 0;
ALTER TABLE {schema}.outbox_entries ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE {schema}.outbox_entries ALTER COLUMN metadata SET STATISTICS 0;

SELECT pg_catalog.run_command_on_placements('{schema}.deliveries',
    'ALTER TABLE %s ALTER COLUMN history SET STATISTICS 0, ALTER COLUMN payload SET STATISTICS 0, ALTER COLUMN metadata SET STATISTICS 0');
SELECT pg_catalog.run_command_on_placements('{schema}.outbox_entries',
    'ALTER TABLE %s ALTER COLUMN history SET STATISTICS 0, ALTER COLUMN payload SET STATISTICS 0, ALTER COLUMN metadata SET STATISTICS 0');
