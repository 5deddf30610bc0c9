-- 0001_init: the delivery ledger, the per-target fences and the outbox.
--
-- {schema} is replaced by the store's schema, quoted as an identifier.
-- Columns mirror ledger.Delivery and ledger.OutboxEntry field by field:
-- every time is timestamptz (NULL for a zero time), IDs and names use
-- COLLATE "C" so ORDER BY id is Go's byte order, durations are bigint
-- microseconds, and a nested struct is present exactly when its first
-- NOT NULL-in-Go column (lease_token, ack_agent, ...) is not NULL.
-- CHECK constraints mirror the state machine's invariants so that a bug
-- fails loudly here instead of storing an impossible record.

CREATE TABLE {schema}.schema_migrations (
    version    integer     NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL,
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE {schema}.deliveries (
    id                       text COLLATE "C" NOT NULL,
    target                   text COLLATE "C" NOT NULL,
    ceremony                 text COLLATE "C",
    payload                  bytea,
    max_attempts             integer     NOT NULL,
    backoff_base_us          bigint      NOT NULL,
    backoff_max_us           bigint      NOT NULL,
    ack_window_us            bigint      NOT NULL,
    state                    text        NOT NULL,
    attempts                 integer     NOT NULL,
    available_at             timestamptz NOT NULL,
    lease_seq                bigint      NOT NULL,
    lease_agent              text COLLATE "C",
    lease_incarnation        text COLLATE "C",
    lease_token              text COLLATE "C",
    lease_granted_at         timestamptz,
    lease_expires_at         timestamptz,
    ended_lease_token        text COLLATE "C",
    ended_lease_seq          bigint,
    ended_lease_op           text,
    ended_lease_at           timestamptz,
    ack_agent                text COLLATE "C",
    ack_incarnation          text COLLATE "C",
    ack_observation          text,
    ack_at                   timestamptz,
    ack_deadline             timestamptz,
    processing_action        text,
    processing_fence         bigint,
    processing_at            timestamptz,
    activations              integer     NOT NULL,
    last_activation_result   text,
    last_activation_detail   text,
    last_activation_at       timestamptz,
    last_failure_kind        text,
    last_failure_message     text,
    last_failure_permanent   boolean,
    last_failure_agent       text COLLATE "C",
    last_failure_incarnation text COLLATE "C",
    last_failure_at          timestamptz,
    cause_kind               text,
    cause_detail             text,
    created_at               timestamptz NOT NULL,
    updated_at               timestamptz NOT NULL,
    ended_at                 timestamptz,
    version                  bigint      NOT NULL,
    CONSTRAINT deliveries_pkey PRIMARY KEY (id),
    CONSTRAINT deliveries_state_check CHECK (state IN ('offered', 'leased', 'acknowledged', 'processed', 'failed', 'expired')),
    -- Terminal exactly when ended_at is set.
    CONSTRAINT deliveries_ended_check CHECK ((state IN ('processed', 'failed', 'expired')) = (ended_at IS NOT NULL)),
    -- A lease is in force exactly while leased or acknowledged.
    CONSTRAINT deliveries_lease_check CHECK (CASE WHEN state IN ('leased', 'acknowledged')
        THEN num_nulls(lease_agent, lease_incarnation, lease_token, lease_granted_at, lease_expires_at) = 0
        ELSE num_nonnulls(lease_agent, lease_incarnation, lease_token, lease_granted_at, lease_expires_at) = 0 END),
    -- Lease selection relies on this: a leased delivery is offerable again
    -- exactly when available_at (= its lease expiry) has come.
    CONSTRAINT deliveries_leased_available_check CHECK (state <> 'leased' OR available_at = lease_expires_at),
    CONSTRAINT deliveries_ack_check CHECK (state <> 'acknowledged' OR (ack_agent IS NOT NULL AND ack_deadline IS NOT NULL)),
    CONSTRAINT deliveries_counts_check CHECK (attempts >= 0 AND max_attempts >= 1 AND activations >= 0 AND lease_seq >= 0 AND version >= 1),
    CONSTRAINT deliveries_ceremony_check CHECK (ceremony <> '')
) WITH (fillfactor = 80);

-- Lease: offerable work, oldest available first (ties by id).
CREATE INDEX deliveries_offerable_idx ON {schema}.deliveries (available_at, id)
    WHERE state IN ('offered', 'leased');
-- Lease with a target filter, and Supersede (a target's open, unacknowledged work).
CREATE INDEX deliveries_offerable_target_idx ON {schema}.deliveries (target, available_at, id)
    WHERE state IN ('offered', 'leased');
-- Expire: leases that ran out.
CREATE INDEX deliveries_lease_expiry_idx ON {schema}.deliveries (lease_expires_at)
    WHERE state = 'leased';
-- Expire: acknowledgements past their deadline.
CREATE INDEX deliveries_ack_deadline_idx ON {schema}.deliveries (ack_deadline)
    WHERE state = 'acknowledged';
-- Lease's incarnation rule: what an agent holds.
CREATE INDEX deliveries_lease_agent_idx ON {schema}.deliveries (lease_agent)
    WHERE state = 'leased';
-- ExpireCeremony, and Lease with a ceremony filter: a ceremony's open work.
CREATE INDEX deliveries_ceremony_open_idx ON {schema}.deliveries (ceremony, id)
    WHERE state IN ('offered', 'leased', 'acknowledged');

-- The highest fence accepted per target (NULL: none yet). MarkProcessed
-- locks the target's row, so fence checks of one target are serialised.
CREATE TABLE {schema}.target_fences (
    target  text COLLATE "C" NOT NULL,
    highest bigint,
    CONSTRAINT target_fences_pkey PRIMARY KEY (target)
);

CREATE TABLE {schema}.outbox_entries (
    id                    text COLLATE "C" NOT NULL,
    provider              text COLLATE "C" NOT NULL,
    kind                  text COLLATE "C" NOT NULL,
    payload               bytea,
    idempotency_key       text COLLATE "C" NOT NULL,
    status                text        NOT NULL,
    attempts              integer     NOT NULL,
    next_attempt_at       timestamptz,
    last_error_code       text,
    last_error_message    text,
    result_provider_ref   text,
    result_detail         text,
    dead_letter_reason    text        NOT NULL,
    claim_seq             bigint      NOT NULL,
    claim_worker          text COLLATE "C",
    claim_token           text COLLATE "C",
    claim_claimed_at      timestamptz,
    claim_expires_at      timestamptz,
    ended_claim_token     text COLLATE "C",
    ended_claim_seq       bigint,
    ended_claim_op        text,
    ended_claim_at        timestamptz,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    ended_at              timestamptz,
    version               bigint      NOT NULL,
    CONSTRAINT outbox_entries_pkey PRIMARY KEY (id),
    CONSTRAINT outbox_entries_status_check CHECK (status IN ('pending', 'retry_scheduled', 'deferred', 'delivered', 'failed', 'dead_lettered')),
    -- Terminal exactly when ended_at is set; a terminal entry holds no claim.
    CONSTRAINT outbox_entries_ended_check CHECK ((status IN ('delivered', 'failed', 'dead_lettered')) = (ended_at IS NOT NULL)),
    CONSTRAINT outbox_entries_claim_check CHECK (CASE WHEN claim_token IS NOT NULL
        THEN num_nulls(claim_worker, claim_claimed_at, claim_expires_at) = 0 AND ended_at IS NULL
        ELSE num_nonnulls(claim_worker, claim_claimed_at, claim_expires_at) = 0 END),
    -- Claim selection relies on this: a scheduled entry always has its time.
    CONSTRAINT outbox_entries_next_attempt_check CHECK ((status IN ('retry_scheduled', 'deferred')) = (next_attempt_at IS NOT NULL)),
    CONSTRAINT outbox_entries_counts_check CHECK (attempts >= 0 AND claim_seq >= 0 AND version >= 1)
) WITH (fillfactor = 80);

-- FindPending, ClaimPending: oldest first.
CREATE INDEX outbox_entries_pending_idx ON {schema}.outbox_entries (created_at, id)
    WHERE status = 'pending';
-- FindRetryReady, ClaimRetryReady: earliest due first.
CREATE INDEX outbox_entries_scheduled_idx ON {schema}.outbox_entries (next_attempt_at, id)
    WHERE status IN ('retry_scheduled', 'deferred');
