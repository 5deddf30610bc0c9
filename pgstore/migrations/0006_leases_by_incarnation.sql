-- 0006_leases_by_incarnation: the incarnation rule reads only what it
-- takes back.
--
-- Every Lease looks for the leases its agent's other incarnations hold.
-- deliveries_leased_idx was keyed (lease_agent, lease_expires_at), so that
-- lookup read every lease the agent held, its own incarnation's included,
-- and filtered them: an agent holding 10,000 leases paid for reading
-- 10,000 rows on every Lease call, to take back none. Keyed (lease_agent,
-- lease_incarnation, lease_expires_at), the lookup reads the ranges before
-- and after the caller's incarnation, which hold exactly the leases it
-- takes back. The expiry sweep still reads the whole index, which holds
-- only leased rows; a grant writes one entry into it as before.

DROP INDEX {schema}.deliveries_leased_idx;
CREATE INDEX deliveries_leased_idx ON {schema}.deliveries (lease_agent, lease_incarnation, lease_expires_at)
    WHERE state = 'leased';
