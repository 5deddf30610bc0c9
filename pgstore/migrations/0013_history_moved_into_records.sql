-- 0013_history_moved_into_records: the history rows written before
-- migration 0012 move into their records' history column.
--
-- pgstore:no-transaction
--
-- Each table is moved in batches of 5,000 records, each batch its own
-- transaction (the DO block commits after each), so that writers wait at
-- most for one batch's records, never for the whole table, and a move
-- that is interrupted keeps what it committed: run again, it moves what
-- is left. A batch locks its records in ID order, the order every sweep
-- and group commit locks in, then deletes their history rows and puts
-- them in front of the entries the record gained since 0012, whose seqs
-- are all higher. Rows whose record is gone are deleted with nothing to
-- join. The walk goes up the history table's primary key from the last
-- ID moved; a row written behind it meanwhile (by a build older than
-- 0012, during a rolling upgrade) stays a row, which History reads
-- beside the column as before. An entry is the array that 0012
-- describes: [seq, op, from_state, to_state, outcome, actor, reason, at].

DO $$
DECLARE
    last text COLLATE "C" := '';
    ids  text[];
BEGIN
    LOOP
        SELECT array_agg(id ORDER BY id) INTO ids FROM (
            SELECT DISTINCT id FROM {schema}.delivery_history WHERE id > last ORDER BY id LIMIT 5000
        ) AS batch;
        EXIT WHEN ids IS NULL;
        PERFORM 1 FROM {schema}.deliveries WHERE id = ANY (ids) ORDER BY id FOR UPDATE;
        WITH moved AS (
            DELETE FROM {schema}.delivery_history WHERE id = ANY (ids)
            RETURNING id, seq, op, from_state, to_state, outcome, actor, reason, at
        ), entries AS (
            SELECT id, jsonb_agg(jsonb_build_array(seq, op, from_state, to_state, outcome, actor, reason, at) ORDER BY seq) AS h
            FROM moved GROUP BY id
        )
        UPDATE {schema}.deliveries AS d SET history = e.h || coalesce(d.history, '[]'::jsonb)
        FROM entries AS e WHERE d.id = e.id;
        last := ids[array_upper(ids, 1)];
        COMMIT;
    END LOOP;
END $$;

DO $$
DECLARE
    last text COLLATE "C" := '';
    ids  text[];
BEGIN
    LOOP
        SELECT array_agg(id ORDER BY id) INTO ids FROM (
            SELECT DISTINCT id FROM {schema}.outbox_entry_history WHERE id > last ORDER BY id LIMIT 5000
        ) AS batch;
        EXIT WHEN ids IS NULL;
        PERFORM 1 FROM {schema}.outbox_entries WHERE id = ANY (ids) ORDER BY id FOR UPDATE;
        WITH moved AS (
            DELETE FROM {schema}.outbox_entry_history WHERE id = ANY (ids)
            RETURNING id, seq, op, from_state, to_state, outcome, actor, reason, at
        ), entries AS (
            SELECT id, jsonb_agg(jsonb_build_array(seq, op, from_state, to_state, outcome, actor, reason, at) ORDER BY seq) AS h
            FROM moved GROUP BY id
        )
        UPDATE {schema}.outbox_entries AS o SET history = e.h || coalesce(o.history, '[]'::jsonb)
        FROM entries AS e WHERE o.id = e.id;
        last := ids[array_upper(ids, 1)];
        COMMIT;
    END LOOP;
END $$;
