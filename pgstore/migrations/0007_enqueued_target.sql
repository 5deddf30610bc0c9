-- 0007_enqueued_target: where a delivery was enqueued, once moved.
--
-- Enqueue answers Repeated to a producer that retries its request, even
-- after the record moved on. A Follow supersession rewrites the target,
-- so the original request no longer matched the row and was answered
-- Conflict. enqueued_target keeps the target the delivery was enqueued
-- for while a supersession has moved it elsewhere (NULL otherwise, which
-- is every row this migration finds: no index, no rewrite of the table).

ALTER TABLE {schema}.deliveries ADD COLUMN enqueued_target text COLLATE "C";
