-- 0003_fewer_lease_indexes: a grant touches fewer indexes.
--
-- A grant changes indexed columns, so every leased row adds an entry to
-- each index whose predicate it satisfies; that index upkeep is most of
-- what a batch lease costs per row. Two indexes go:
--
-- deliveries_lease_expiry_idx and deliveries_lease_agent_idx (both over
-- leased rows) become one index on (lease_agent, lease_expires_at). The
-- incarnation rule looks up one agent's leases by its prefix; the expiry
-- sweep reads the whole of it, which holds only the leased rows, the work
-- in hand, never the backlog or the history.
--
-- deliveries_ceremony_open_idx no longer holds deliveries without a
-- ceremony: every query that uses it names one.

DROP INDEX {schema}.deliveries_lease_expiry_idx;
DROP INDEX {schema}.deliveries_lease_agent_idx;
CREATE INDEX deliveries_leased_idx ON {schema}.deliveries (lease_agent, lease_expires_at)
    WHERE state = 'leased';

DROP INDEX {schema}.deliveries_ceremony_open_idx;
CREATE INDEX deliveries_ceremony_open_idx ON {schema}.deliveries (ceremony, id)
    WHERE ceremony IS NOT NULL AND state IN ('offered', 'leased', 'acknowledged');
