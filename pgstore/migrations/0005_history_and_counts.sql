-- 0005_history_and_counts: the history of every record, and the counts
-- behind Stats and OutboxStats.
--
-- History: one row per applied transition of a delivery (delivery_history)
-- or an outbox entry (outbox_entry_history), written by the store in the
-- transaction that applies the transition, and deleted by the purge that
-- deletes its record. seq is the record's version after the transition
-- (every applied transition bumps it by one, and a record starts at 1), so
-- a record's rows are numbered 1, 2, 3, ... from its creation, and the
-- primary key is also the order History reads them in. Empty strings are
-- stored as NULL: from_state of a creation, actor of a call made for
-- nobody in particular, reason of a change that recorded none. Records
-- that existed before this migration have no rows for their earlier
-- transitions: their history starts at the first transition after it.
--
-- Counts: Stats counts open records through the partial indexes on open
-- rows, but the terminal ones, which are most of a table that is not
-- purged often, would cost a scan of millions of rows. So the store keeps
-- their number, per key, in the transaction of every transition into or
-- out of a terminal state, and purge takes away what it deletes.
-- Deliveries are counted by (target, ceremony, state, cause_kind):
-- ceremony is '' for none, cause_kind the kind of an Expired delivery's
-- cause and '' otherwise. Outbox entries are counted by status. Each key
-- is spread over 16 rows by shard, the first byte of the SHA-256 of the
-- record's ID modulo 16 (the store computes the same in Go), so that
-- concurrent completions of one target queue on 16 rows instead of one; a
-- count is the sum over its shards. The counts tables are small and
-- updated in place: n is in no index, and the fillfactor leaves room for
-- HOT updates.

CREATE TABLE {schema}.delivery_history (
    id         text COLLATE "C" NOT NULL,
    seq        bigint      NOT NULL,
    op         text        NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    outcome    text        NOT NULL,
    actor      text COLLATE "C",
    reason     text,
    at         timestamptz NOT NULL,
    CONSTRAINT delivery_history_pkey PRIMARY KEY (id, seq)
);

CREATE TABLE {schema}.outbox_entry_history (
    id         text COLLATE "C" NOT NULL,
    seq        bigint      NOT NULL,
    op         text        NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    outcome    text        NOT NULL,
    actor      text COLLATE "C",
    reason     text,
    at         timestamptz NOT NULL,
    CONSTRAINT outbox_entry_history_pkey PRIMARY KEY (id, seq)
);

CREATE TABLE {schema}.delivery_counts (
    target     text COLLATE "C" NOT NULL,
    ceremony   text COLLATE "C" NOT NULL,
    state      text             NOT NULL,
    cause_kind text COLLATE "C" NOT NULL,
    shard      smallint         NOT NULL,
    n          bigint           NOT NULL,
    CONSTRAINT delivery_counts_pkey PRIMARY KEY (target, ceremony, state, cause_kind, shard),
    CONSTRAINT delivery_counts_state_check CHECK (state IN ('processed', 'failed', 'expired')),
    CONSTRAINT delivery_counts_shard_check CHECK (shard BETWEEN 0 AND 15)
) WITH (fillfactor = 50);

-- Stats with a ceremony filter and no target.
CREATE INDEX delivery_counts_ceremony_idx ON {schema}.delivery_counts (ceremony)
    WHERE ceremony <> '';

CREATE TABLE {schema}.outbox_counts (
    status text     NOT NULL,
    shard  smallint NOT NULL,
    n      bigint   NOT NULL,
    CONSTRAINT outbox_counts_pkey PRIMARY KEY (status, shard),
    CONSTRAINT outbox_counts_status_check CHECK (status IN ('delivered', 'failed', 'dead_lettered')),
    CONSTRAINT outbox_counts_shard_check CHECK (shard BETWEEN 0 AND 15)
) WITH (fillfactor = 50);

-- Count the terminal records already stored, once (a scan of each table).
INSERT INTO {schema}.delivery_counts (target, ceremony, state, cause_kind, shard, n)
SELECT target, coalesce(ceremony, ''), state,
    CASE WHEN state = 'expired' THEN coalesce(cause_kind, '') ELSE '' END,
    get_byte(sha256(convert_to(id, 'UTF8')), 0) % 16, count(*)
FROM {schema}.deliveries
WHERE ended_at IS NOT NULL
GROUP BY 1, 2, 3, 4, 5;

INSERT INTO {schema}.outbox_counts (status, shard, n)
SELECT status, get_byte(sha256(convert_to(id, 'UTF8')), 0) % 16, count(*)
FROM {schema}.outbox_entries
WHERE ended_at IS NOT NULL
GROUP BY 1, 2;
