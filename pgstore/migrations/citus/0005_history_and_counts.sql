-- 0005_history_and_counts, the form Migrate applies on Citus (see
-- ../0005_history_and_counts.sql for the tables and what they hold).
--
-- The same tables and indexes; only the one-time count of the terminal
-- records already stored differs. Citus pushes the plain INSERT ...
-- SELECT ... GROUP BY between two tables of a distributed schema down to
-- the worker rewritten into SQL that the worker refuses (a condition
-- "( IS NOT NULL)"); with the SELECT in a MATERIALIZED CTE ahead of the
-- INSERT it runs the SELECT first and inserts its rows, which counts
-- the same rows into the same keys.

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
WITH counted AS MATERIALIZED (
    SELECT target, coalesce(ceremony, '') AS ceremony, state,
        CASE WHEN state = 'expired' THEN coalesce(cause_kind, '') ELSE '' END AS cause_kind,
        get_byte(sha256(convert_to(id, 'UTF8')), 0) % 16 AS shard, count(*) AS n
    FROM {schema}.deliveries
    WHERE ended_at IS NOT NULL
    GROUP BY 1, 2, 3, 4, 5
)
INSERT INTO {schema}.delivery_counts (target, ceremony, state, cause_kind, shard, n)
SELECT target, ceremony, state, cause_kind, shard, n FROM counted;

WITH counted AS MATERIALIZED (
    SELECT status, get_byte(sha256(convert_to(id, 'UTF8')), 0) % 16 AS shard, count(*) AS n
    FROM {schema}.outbox_entries
    WHERE ended_at IS NOT NULL
    GROUP BY 1, 2
)
INSERT INTO {schema}.outbox_counts (status, shard, n)
SELECT status, shard, n FROM counted;
