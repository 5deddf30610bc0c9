package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger/storekit"
)

// The ceilings are what the server itself does on this machine, measured
// in the same run with the same number of sessions as -workers, so that a
// store figure can be read as a share of what is possible here rather than
// as an absolute number that moves with the hardware:
//
//	(i)  committed single-row UPDATE transactions/s: every session runs
//	     autocommit UPDATE t SET v = v + 1 WHERE id = $1 on random rows of
//	     a small table, what pgbench -N measures. A store call that commits
//	     once cannot beat it; only calls sharing commits can.
//	(ii) rows/s updated 1,000 rows per statement in a plain table with a
//	     primary key and a delivery's row width (a 256-byte payload, about
//	     300 bytes a row), each session on rows of its own. A store moving
//	     items in batches is set against it.
//
// Both run in a scratch schema dropped afterwards.

const (
	// txnTableRows is the small table of (i): large enough that sessions
	// rarely wait on each other's row locks.
	txnTableRows = 10_000
	// rowsPerStatement is the batch of (ii).
	rowsPerStatement = 1_000
	// blocksPerWorker is how many batches of rows each session of (ii)
	// cycles through, so that consecutive statements of one session do not
	// update the same row versions.
	blocksPerWorker = 4
	// ceilingPayload is the payload width of (ii)'s rows, a delivery's.
	ceilingPayload = 256
)

// measureCeilings measures (i) and (ii).
func (e *env) measureCeilings(ctx context.Context) (*ceilings, error) {
	schema := "ledgerbench_scratch_" + strings.ToLower(string(storekit.NewToken())[:8])
	defer e.dropSchema(ctx, schema)
	txnTable := pgx.Identifier{schema, "t"}.Sanitize()
	rowsTable := pgx.Identifier{schema, "b"}.Sanitize()
	workers := e.cfg.workers
	setup := []string{
		"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		"CREATE TABLE " + txnTable + " (id integer PRIMARY KEY, v bigint NOT NULL)",
		fmt.Sprintf("INSERT INTO %s SELECT i, 0 FROM generate_series(1, %d) AS i", txnTable, txnTableRows),
		"CREATE TABLE " + rowsTable + " (id bigint PRIMARY KEY, v bigint NOT NULL, label text NOT NULL, payload bytea NOT NULL)",
		fmt.Sprintf(`INSERT INTO %s SELECT i, 0, 'row-' || lpad(i::text, 10, '0'), convert_to(repeat('x', %d), 'UTF8')
			FROM generate_series(0, %d) AS i`, rowsTable, ceilingPayload, workers*blocksPerWorker*rowsPerStatement-1),
		"VACUUM ANALYZE " + txnTable,
		"VACUUM ANALYZE " + rowsTable,
	}
	for _, sql := range setup {
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}

	txnSQL := "UPDATE " + txnTable + " SET v = v + 1 WHERE id = $1"
	txns, txnElapsed, err := e.hammer(ctx, "ceiling (i): single-row UPDATE transactions", func(ctx context.Context, w int, rng *rand.Rand, _ int) (int, error) {
		_, err := e.pool.Exec(ctx, txnSQL, 1+rng.IntN(txnTableRows))
		return 1, err
	})
	if err != nil {
		return nil, fmt.Errorf("(i): %w", err)
	}

	rowsSQL := "UPDATE " + rowsTable + " SET v = v + 1 WHERE id >= $1 AND id < $2"
	rows, rowsElapsed, err := e.hammer(ctx, "ceiling (ii): rows updated 1,000 per statement", func(ctx context.Context, w int, _ *rand.Rand, n int) (int, error) {
		from := (w*blocksPerWorker + n%blocksPerWorker) * rowsPerStatement
		tag, err := e.pool.Exec(ctx, rowsSQL, from, from+rowsPerStatement)
		return int(tag.RowsAffected()), err
	})
	if err != nil {
		return nil, fmt.Errorf("(ii): %w", err)
	}

	c := &ceilings{
		Workers:           workers,
		Seconds:           e.cfg.ceilingDuration.Seconds(),
		UpdateTxnPerSec:   float64(txns) / txnElapsed.Seconds(),
		BatchedRowsPerSec: float64(rows) / rowsElapsed.Seconds(),
	}
	c.UpdateTxnMillis = float64(workers) * 1000 / c.UpdateTxnPerSec
	return c, nil
}

// hammer runs op from -workers goroutines for -ceiling-duration and
// returns the units they counted and the time taken. op gets its worker
// number, a random source of its own and how many times it ran before.
func (e *env) hammer(ctx context.Context, label string, op func(ctx context.Context, w int, rng *rand.Rand, n int) (int, error)) (int, time.Duration, error) {
	ph := e.prog.begin(label, 0)
	counts := make([]int, e.cfg.workers)
	start := time.Now()
	deadline := start.Add(e.cfg.ceilingDuration)
	err := runWorkers(ctx, e.cfg.workers, func(ctx context.Context, w int) error {
		rng := rand.New(rand.NewPCG(uint64(w), 0x5eed))
		for n := 0; time.Now().Before(deadline); n++ {
			k, err := op(ctx, w, rng, n)
			if err != nil {
				return err
			}
			counts[w] += k
			ph.add(k)
		}
		return nil
	})
	elapsed := time.Since(start)
	ph.end()
	if err != nil {
		return 0, 0, err
	}
	total := 0
	for _, k := range counts {
		total += k
	}
	return total, elapsed, nil
}
