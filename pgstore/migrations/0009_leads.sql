-- 0009_leads: leadership leases (ledger.Elector), one row per name.
--
-- A sweeper that many processes run takes the lead of each kind of work
-- before doing it, so that one process does it at a time. A lead is row
-- state like every lease of this store: taken, renewed and given up in
-- short transactions, never held by a session or an advisory lock, so it
-- works through PgBouncer in transaction pooling mode. The table holds a
-- handful of rows and is written once per sweep interval per process:
-- nothing on the path of enqueue, lease, claim or completion touches it.
-- A new table, so the migration runs in a transaction.

CREATE TABLE {schema}.leads (
    name       text COLLATE "C" NOT NULL,
    holder     text COLLATE "C" NOT NULL,
    token      text COLLATE "C" NOT NULL,
    seq        bigint      NOT NULL,
    taken_at   timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT leads_pkey PRIMARY KEY (name),
    CONSTRAINT leads_seq_check CHECK (seq > 0)
);
