package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
)

// Group commit when the connection of a group transaction is lost at its
// COMMIT. Many goroutines acknowledge leased deliveries in one group, and
// the group's connection is lost at the commit in one of four ways: the
// server ends the backend just before the COMMIT is sent, or while the
// COMMIT runs; or the client loses the connection before the COMMIT
// reaches the server, or after the server committed but before its answer
// arrives. Whatever happened, every call must answer truthfully: success
// only when its transition is durable, an error otherwise, and nothing of
// the group half applied; and a call that failed, made again, says
// whether the lost commit had landed.
//
// The fault is placed with a tracer on the store's pool, which sees the
// batch that ends a group transaction (its last statement is COMMIT; a
// call on its own commits with tx.Commit, not in a batch) just before it
// is sent, and with a net.Conn under the pool's connections that can drop
// what goes one way or the other, reading the protocol's message framing.

// faultCallers is how many goroutines make the calls of the group.
const faultCallers = 32

// errConnectionCut is what a cut connection reads instead of what the
// server sent.
var errConnectionCut = errors.New("connection cut by the test")

// cutMode says where a cutConn loses the connection.
type cutMode int32

const (
	cutNone    cutMode = iota
	cutRequest         // the next request that executes anything never reaches the server
	cutReply           // the server's answer to COMMIT, and all after it, never reaches the client
	cutAfter           // the next request that executes anything reaches the server, and the link is cut at once
)

// poolerError is the ErrorResponse PgBouncer sends its client when its
// link to the server drops: severity ERROR, SQLSTATE 08P01, "server conn
// crashed?". It may come after the server committed.
var poolerError = func() []byte {
	body := []byte("SERROR\x00C08P01\x00Mserver conn crashed?\x00\x00")
	msg := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(body)))
	return append(msg, body...)
}()

// cutConn is a client connection that loses itself where its mode says.
// Once cut, writes vanish and reads fail with errConnectionCut, as a
// connection whose peer went away, and what the server sent is never
// read.
type cutConn struct {
	net.Conn
	mode   atomic.Int32 // a cutMode, set before the request it is about is written
	cut    atomic.Bool
	landed atomic.Bool // the server answered COMMIT (cutReply)
	// pooler: once cut, the client reads poolerError, as from PgBouncer,
	// before the connection reads as lost.
	pooler atomic.Bool
	told   atomic.Bool // poolerError was read

	readMu  sync.Mutex // serialises the filtering reads of cutReply
	in, out []byte     // from the server: an incomplete message; whole messages for the client
	// completed and failed: since cutReply was set, the server answered
	// a statement, and answered an error.
	completed, failed bool
}

func (c *cutConn) Write(p []byte) (int, error) {
	if c.cut.Load() {
		return len(p), nil
	}
	executes := hasMessage(p, 'E') || hasMessage(p, 'Q')
	switch cutMode(c.mode.Load()) {
	case cutRequest:
		if executes {
			c.lose()
			return len(p), nil
		}
	case cutAfter:
		if executes {
			// Cut before the write: the driver may read the answer on
			// another goroutine while it writes (pgconn's background
			// reader), and an answer read before the cut would tell it
			// that the request succeeded on a connection the test then
			// treats as lost.
			c.cut.Store(true)
			n, err := c.Conn.Write(p)
			c.lose()
			// The server reads what was sent, then finds its client gone.
			if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return n, err
		}
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Read(p []byte) (int, error) {
	if cutMode(c.mode.Load()) == cutReply {
		return c.readUntilCommit(p, nil)
	}
	if c.cut.Load() {
		return c.readCut(p)
	}
	n, err := c.Conn.Read(p)
	if c.cut.Load() {
		// Cut while the read waited: what it read is never seen.
		return c.readCut(p)
	}
	if n > 0 && cutMode(c.mode.Load()) == cutReply {
		// The mode was set while this read waited: pgconn's background
		// reader, started when a write takes over 15 ms (as on a loaded
		// machine), leaves a Read waiting across requests. What it read
		// is the answer the mode is about, and goes through the filter.
		return c.readUntilCommit(p, p[:n])
	}
	return n, err
}

// readCut is a read of a cut connection: poolerError once, when it
// stands for a pooler, then a lost connection.
func (c *cutConn) readCut(p []byte) (int, error) {
	if c.pooler.Load() && c.told.CompareAndSwap(false, true) {
		return copy(p, poolerError), nil
	}
	return 0, errConnectionCut
}

// lose cuts the connection, waking a read that waits for an answer that
// will not come.
func (c *cutConn) lose() {
	c.cut.Store(true)
	_ = c.Conn.SetReadDeadline(time.Now())
}

// readUntilCommit passes the server's messages on, whole, until the
// server answers COMMIT (a CommandComplete with tag COMMIT): the commit
// has then landed, and the connection is cut before the answer is read.
// read is what was already read from the server and not yet filtered.
func (c *cutConn) readUntilCommit(p, read []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.in = append(c.in, read...)
	c.filter()
	buf := make([]byte, 8192)
	for len(c.out) == 0 {
		if c.cut.Load() {
			return 0, errConnectionCut
		}
		n, err := c.Conn.Read(buf)
		c.in = append(c.in, buf[:n]...)
		c.filter()
		if err != nil && len(c.out) == 0 && !c.cut.Load() {
			return 0, err
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// filter moves the whole messages of c.in to c.out, up to the answer
// that says the commit landed, where it cuts the connection.
func (c *cutConn) filter() {
	if c.cut.Load() {
		return
	}
	for len(c.in) >= 5 {
		size := 1 + int(binary.BigEndian.Uint32(c.in[1:5]))
		if len(c.in) < size {
			break
		}
		msg := c.in[:size]
		switch {
		case msg[0] == 'E':
			c.failed = true
		case msg[0] == 'C':
			c.completed = true
		}
		// A COMMIT answered; or, for a transaction of one round trip
		// (oneTrip), its statements answered without an error and the
		// ReadyForQuery after them, which the server sends once it
		// committed at the Sync.
		if msg[0] == 'C' && string(msg[5:]) == "COMMIT\x00" || msg[0] == 'Z' && c.completed && !c.failed {
			c.landed.Store(true)
			c.lose()
			if c.pooler.Load() && c.told.CompareAndSwap(false, true) {
				c.out = append(c.out, poolerError...)
			}
			break
		}
		c.out = append(c.out, c.in[:size]...)
		c.in = c.in[size:]
	}
}

// hasMessage reports whether p, whole frontend messages as the driver
// writes them, holds a message of type typ.
func hasMessage(p []byte, typ byte) bool {
	for len(p) >= 5 {
		if p[0] == typ {
			return true
		}
		size := 1 + int(binary.BigEndian.Uint32(p[1:5]))
		if size < 5 || size > len(p) {
			return false
		}
		p = p[size:]
	}
	return false
}

// commitTracer runs atCommit, once and only once armed, on the goroutine
// of the transaction whose COMMIT is about to be sent (a group's final
// batch, its last statement COMMIT, or a call's own tx.Commit), with its
// connection.
type commitTracer struct {
	armed    atomic.Bool
	fired    atomic.Int32
	atCommit func(ctx context.Context, conn *pgx.Conn) error

	mu  sync.Mutex
	err error // what atCommit returned
}

// TraceQueryStart sees the COMMIT of a call on its own (tx.Commit).
func (tr *commitTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	// A statement alone outside a transaction, as a held write is sent,
	// commits at its Sync.
	implicit := conn.PgConn().TxStatus() == 'I' && !strings.EqualFold(data.SQL, "begin")
	if implicit || strings.EqualFold(data.SQL, "commit") {
		tr.commit(ctx, conn)
	}
	return ctx
}

// commit runs atCommit for the first COMMIT seen once armed.
func (tr *commitTracer) commit(ctx context.Context, conn *pgx.Conn) {
	if !tr.armed.Load() || !tr.fired.CompareAndSwap(0, 1) {
		return
	}
	if err := tr.atCommit(ctx, conn); err != nil {
		tr.mu.Lock()
		tr.err = err
		tr.mu.Unlock()
	}
}

func (tr *commitTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart sees the batch that ends a group transaction (its
// last statement COMMIT) and a transaction of one round trip (oneTrip):
// a batch sent outside a transaction that does not begin one, which the
// server commits at its Sync.
func (tr *commitTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	q := data.Batch.QueuedQueries
	if len(q) == 0 {
		return ctx
	}
	implicit := conn.PgConn().TxStatus() == 'I' && !strings.EqualFold(q[0].SQL, "begin")
	if implicit || q[len(q)-1].SQL == "COMMIT" {
		tr.commit(ctx, conn)
	}
	return ctx
}

func (tr *commitTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (tr *commitTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// faultFixture is a store on a traced pool of cuttable connections, with
// faultCallers leased deliveries.
type faultFixture struct {
	s      *Store
	ctx    context.Context
	admin  *pgxpool.Pool // an ordinary pool, for the test's own statements
	app    string        // the application_name of the store's connections
	tracer *commitTracer
	ids    []ledger.DeliveryID
	leases map[ledger.DeliveryID]ledger.Lease
	before map[ledger.DeliveryID]ledger.Delivery // as leased
	// pid is the backend of the group transaction, once its COMMIT is
	// about to be sent.
	pid atomic.Uint32
	// conn is the group's connection, once its COMMIT is about to be sent.
	conn atomic.Pointer[cutConn]
	// holder holds the advisory lock of holdCommits.
	holder *pgx.Conn
}

func newFaultFixture(t *testing.T) *faultFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &faultFixture{ctx: ctx, admin: pgtest.Pool(t), app: "pgstore-fault-" + rand.Text()[:12], tracer: &commitTracer{}}
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.ConnConfig.RuntimeParams["application_name"] = f.app
	cfg.ConnConfig.Tracer = f.tracer
	// The cut reads the protocol, so it must see it in the clear.
	cfg.ConnConfig.TLSConfig = nil
	for _, fb := range cfg.ConnConfig.Fallbacks {
		fb.TLSConfig = nil
	}
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: conn}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	f.s, err = New(pool, WithSchema(pgtest.Schema(t, pool)), WithClock(func() time.Time { return groupT0 }),
		WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, f.s.Migrate(ctx))

	for i := range faultCallers {
		f.ids = append(f.ids, ledger.DeliveryID(fmt.Sprintf("d%02d", i)))
	}
	f.leases = leasedDeliveries(ctx, t, f.s, f.ids...)
	f.before = map[ledger.DeliveryID]ledger.Delivery{}
	for _, id := range f.ids {
		d, err := f.s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateLeased, d.State)
		f.before[id] = d
	}
	return f
}

// cut returns an atCommit that sets the mode of the group's connection.
func (f *faultFixture) cut(mode cutMode) func(context.Context, *pgx.Conn) error {
	return f.cutAs(mode, false)
}

// cutAs is cut, the client reading poolerError at the cut when pooler.
func (f *faultFixture) cutAs(mode cutMode, pooler bool) func(context.Context, *pgx.Conn) error {
	return func(_ context.Context, conn *pgx.Conn) error {
		c, ok := conn.PgConn().Conn().(*cutConn)
		if !ok {
			return fmt.Errorf("the group's connection is a %T, not the test's", conn.PgConn().Conn())
		}
		c.pooler.Store(pooler)
		c.mode.Store(int32(mode))
		f.conn.Store(c)
		f.pid.Store(conn.PgConn().PID())
		return nil
	}
}

// terminate ends backend pid from the test's own pool and waits until it
// has exited. pg_terminate_backend's timeout argument, which waits, came
// in PostgreSQL 14; the tests run on 13 too, so the test waits itself,
// polling pg_stat_activity.
func (f *faultFixture) terminate(ctx context.Context, pid uint32) error {
	var ok bool
	if err := f.admin.QueryRow(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", int32(pid)).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("backend %d was not signalled", pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var alive bool
		if err := f.admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1)", int32(pid)).Scan(&alive); err != nil {
			return err
		}
		if !alive {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backend %d did not exit", pid)
		}
		time.Sleep(time.Millisecond) // polling a server process's exit, not letting time pass
	}
}

// commitFault is one way of losing the group's connection at its COMMIT.
type commitFault struct {
	// prepare runs once the deliveries are leased, before the calls.
	prepare func(t *testing.T, f *faultFixture)
	// atCommit runs on the group's goroutine just before its COMMIT is
	// sent (nil: record the backend only).
	atCommit func(f *faultFixture) func(context.Context, *pgx.Conn) error
	// during runs on the test's goroutine while the calls wait.
	during func(t *testing.T, f *faultFixture)
	// landed: the group's commit reached the disk, though its caller
	// never heard.
	landed bool
	// unknown: the answer to the COMMIT does not tell whether it landed
	// (the connection was cut, or a pooler said its link dropped): the
	// store reads what it wrote to learn it, and every call answers
	// without an error, Applied exactly when its write is there.
	unknown bool
	// racy: the cut comes right after the COMMIT was sent, and whether
	// the server committed first is not known to the test either.
	racy bool
	// refused: the server answered the COMMIT with an error, so the store
	// knows that nothing was applied, and every call, run again on its
	// own, applies.
	refused bool
}

// TestGroupCommitConnectionLostAtCommit loses a group's connection at its
// COMMIT in each of the ways above (see runCommitFault for the checks).
func TestGroupCommitConnectionLostAtCommit(t *testing.T) {
	faults := map[string]commitFault{
		// The backend is terminated, and gone, when the batch with the
		// COMMIT goes out: the transaction was rolled back.
		"KilledBeforeCommitSent": {
			atCommit: func(f *faultFixture) func(context.Context, *pgx.Conn) error {
				return func(ctx context.Context, conn *pgx.Conn) error {
					return f.terminate(context.WithoutCancel(ctx), conn.PgConn().PID())
				}
			},
		},
		// A deferred constraint trigger makes the COMMIT wait on an
		// advisory lock the test holds; the backend is terminated while
		// its commit (its COMMIT, or the Sync that ends a transaction of
		// one round trip) waits there, before the commit record is
		// written.
		"KilledWhileCommitRuns": {
			prepare: holdCommits,
			during: func(t *testing.T, f *faultFixture) {
				var pid uint32
				require.Eventually(t, func() bool {
					pid = f.pid.Load()
					if pid == 0 {
						return false
					}
					var waiting bool
					err := f.admin.QueryRow(f.ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
						WHERE pid = $1 AND application_name = $2 AND wait_event = 'advisory')`,
						int32(pid), f.app).Scan(&waiting)
					return err == nil && waiting
				}, 30*time.Second, 5*time.Millisecond, "the group's COMMIT never waited in its deferred trigger")
				require.NoError(t, f.terminate(f.ctx, pid))
				releaseCommits(t, f)
			},
			refused: true,
		},
		// The batch with the COMMIT never reaches the server, and the
		// client reads a lost connection: the outcome is unknown to the
		// store, and the transaction is rolled back when the connection
		// closes.
		"CutBeforeCommitArrives": {
			atCommit: func(f *faultFixture) func(context.Context, *pgx.Conn) error { return f.cut(cutRequest) },
			unknown:  true,
		},
		// The server commits, and the connection is lost before its
		// answer is read: the outcome is unknown to the store, and the
		// commit landed.
		"CutAfterCommitLanded": {
			atCommit: func(f *faultFixture) func(context.Context, *pgx.Conn) error { return f.cut(cutReply) },
			landed:   true,
			unknown:  true,
		},
		// The link is cut right after the COMMIT was sent: the server
		// reads it and finds its client gone.
		"CutRightAfterCommitSent": {
			atCommit: func(f *faultFixture) func(context.Context, *pgx.Conn) error { return f.cut(cutAfter) },
			unknown:  true,
			racy:     true,
		},
		// A pooler's server link drops after the server committed, and
		// the pooler answers 08P01 (PgBouncer's "server conn crashed?"):
		// an error response that does not mean nothing committed.
		"PoolerErrorAfterCommitLanded": {
			atCommit: func(f *faultFixture) func(context.Context, *pgx.Conn) error { return f.cutAs(cutReply, true) },
			landed:   true,
			unknown:  true,
		},
		// The same answer when the COMMIT never reached the server.
		"PoolerErrorBeforeCommitArrives": {
			atCommit: func(f *faultFixture) func(context.Context, *pgx.Conn) error { return f.cutAs(cutRequest, true) },
			unknown:  true,
		},
	}
	// Held: the group decides on the records the store holds from its
	// own leases (held.go) and commits its write in a statement of its
	// own. Ordinary: the store holds none, and the group locks and reads
	// its rows first.
	for name, fault := range faults {
		for _, path := range []struct {
			name string
			held bool
		}{{"Held", true}, {"Ordinary", false}} {
			t.Run(name+"/"+path.name, func(t *testing.T) { runCommitFault(t, fault, path.held) })
		}
	}
}

// holdCommits makes every later transaction that updates a delivery wait,
// at its COMMIT, for an advisory lock that the test now holds until
// releaseCommits: a deferred constraint trigger takes the lock, shared,
// when the transaction commits.
func holdCommits(t *testing.T, f *faultFixture) {
	schema := pgx.Identifier{f.s.cfg.schema}.Sanitize()
	for _, sql := range []string{
		`CREATE FUNCTION ` + schema + `.hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext(TG_TABLE_SCHEMA)); RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER hold_commit AFTER UPDATE ON ` + schema + `.deliveries
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ` + schema + `.hold_commit()`,
	} {
		_, err := f.admin.Exec(f.ctx, sql)
		require.NoError(t, err)
	}
	conn, err := pgx.Connect(f.ctx, pgtest.DSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(f.ctx, "SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtext($1))", f.s.cfg.schema)
	require.NoError(t, err)
	f.holder = conn
}

// releaseCommits lets the transactions that holdCommits holds commit.
func releaseCommits(t *testing.T, f *faultFixture) {
	_, err := f.holder.Exec(f.ctx, "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtext($1))", f.s.cfg.schema)
	require.NoError(t, err)
}

// runCommitFault makes faultCallers concurrent Acknowledge calls in one
// group, loses the group's connection at its COMMIT as fault says, and
// checks what every call answered against what the database holds.
func runCommitFault(t *testing.T, fault commitFault, held bool) {
	f := newFaultFixture(t)
	ctx, s := f.ctx, f.s
	for _, id := range f.ids {
		_, pos, ok := s.held.deliveries.cache.get(string(id))
		require.True(t, ok, "%s is held from its lease", id)
		require.True(t, pos.known(), "%s is held with the position its lease wrote", id)
		if !held {
			s.held.deliveries.cache.drop(string(id))
		}
	}
	if fault.prepare != nil {
		fault.prepare(t, f)
	}
	f.tracer.atCommit = f.cut(cutNone)
	if fault.atCommit != nil {
		record, inject := f.cut(cutNone), fault.atCommit(f)
		f.tracer.atCommit = func(ctx context.Context, conn *pgx.Conn) error {
			if err := record(ctx, conn); err != nil {
				return err
			}
			return inject(ctx, conn)
		}
	}
	f.tracer.armed.Store(true)
	fixGroups(s, faultCallers) // one group of every call

	out := make([]answer[ledger.DeliveryResult], len(f.ids))
	var wg sync.WaitGroup
	for i, id := range f.ids {
		wg.Go(func() { out[i].res, out[i].err = s.Acknowledge(ctx, f.leases[id], "seen", groupT0) })
	}
	if fault.during != nil {
		fault.during(t, f)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the calls did not return")
	}

	// The fault was placed, once, in the one group of all the calls.
	require.EqualValues(t, 1, f.tracer.fired.Load(), "the group's COMMIT was seen once")
	require.NoError(t, f.tracer.err)
	require.EqualValues(t, 1, s.groups.deliveries.groupsRun.Load())
	require.EqualValues(t, faultCallers, s.groups.deliveries.callsGrouped.Load())
	if fault.unknown {
		c := f.conn.Load()
		require.True(t, c.cut.Load(), "the group's connection was cut")
		if !fault.racy {
			require.Equal(t, fault.landed, c.landed.Load(), "the server answered the COMMIT")
		}
		require.Equal(t, c.pooler.Load(), c.told.Load(), "the pooler's error was read")
	}

	var failed []ledger.DeliveryID
	for i, id := range f.ids {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		h, err := s.History(ctx, id)
		require.NoError(t, err)
		if got := out[i]; got.err != nil {
			failed = append(failed, id)
			require.NotErrorIs(t, got.err, context.Canceled, string(id))
			require.NotErrorIs(t, got.err, context.DeadlineExceeded, string(id))
		} else {
			// Each delivery has one call: success is Applied, or nothing.
			require.Equal(t, ledger.OutcomeApplied, got.res.Outcome, "%s answered without an error", id)
			require.Equal(t, ledger.DeliveryStateAcknowledged, d.State, "%s answered Applied but is not acknowledged", id)
			require.Equal(t, d, got.res.Delivery, "%s: the answer is the record as it stands", id)
		}
		checkWhole(t, f.before[id], d, h)
	}
	if fault.unknown {
		require.Empty(t, failed, "the commit's outcome was settled by reading the rows: no call fails")
	}
	if fault.refused {
		require.Empty(t, failed, "the commit failed, known to have applied nothing: every call runs again on its own")
	}

	// The calls that failed were decided by the one group: its commit
	// landed for all of them or for none, as the fault says. Each, made
	// again (concurrently, grouped as the queue pleases), says which.
	for _, id := range failed {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, fault.landed, d.State == ledger.DeliveryStateAcknowledged, "%s: did the group's commit land?", id)
	}
	s.groups.deliveries.window, s.groups.deliveries.max = DefaultGroupCommitWindow, DefaultGroupCommitMax
	again := make([]answer[ledger.DeliveryResult], len(failed))
	for i, id := range failed {
		wg.Go(func() { again[i].res, again[i].err = s.Acknowledge(ctx, f.leases[id], "seen", groupT0) })
	}
	wg.Wait()
	want := ledger.OutcomeApplied
	if fault.landed {
		want = ledger.OutcomeRepeated
	}
	for i, id := range failed {
		require.NoError(t, again[i].err, string(id))
		require.Equal(t, want, again[i].res.Outcome, "%s made again", id)
	}
	// Now every delivery is acknowledged, exactly once.
	for _, id := range f.ids {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateAcknowledged, d.State, string(id))
		h, err := s.History(ctx, id)
		require.NoError(t, err)
		checkWhole(t, f.before[id], d, h)
	}
	t.Logf("%d of %d calls failed; the group's commit landed: %v", len(failed), faultCallers, fault.landed)
}

// checkWhole checks that d, with its history h, is either as leased
// (before) or acknowledged once after it, with record, version and
// history agreeing: never part of a transition.
func checkWhole(t *testing.T, before, d ledger.Delivery, h []ledger.Transition) {
	t.Helper()
	require.NotEmpty(t, h, string(d.ID))
	require.Equal(t, d.Version, h[len(h)-1].Seq, "%s: the history ends at the record's version", d.ID)
	switch d.State {
	case ledger.DeliveryStateLeased:
		require.Equal(t, before, d, "%s: untouched", d.ID)
		require.Len(t, h, 2, "%s: enqueue and lease", d.ID)
	case ledger.DeliveryStateAcknowledged:
		require.Equal(t, before.Version+1, d.Version, "%s: acknowledged once", d.ID)
		require.NotNil(t, d.Ack, string(d.ID))
		require.Equal(t, "seen", d.Ack.Observation, string(d.ID))
		require.Equal(t, before.Lease, d.Lease, "%s: under its lease", d.ID)
		require.Len(t, h, 3, "%s: enqueue, lease and acknowledge", d.ID)
		require.Equal(t, ledger.OpAcknowledge, h[2].Op, string(d.ID))
	default:
		t.Fatalf("%s: state %s", d.ID, d.State)
	}
}
