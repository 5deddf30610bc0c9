package pgstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

var (
	diffSeeds = flag.Int("diff.seeds", 200, "how many random sequences TestRandomSequencesMatchMemstore runs (seeds 1..N; 25 under -short unless set)")
	diffSeed  = flag.Uint64("diff.seed", 0, "replay only this seed of TestRandomSequencesMatchMemstore")
)

const (
	// diffSteps is the length of one random sequence.
	diffSteps = 50
	// diffWorkers is how many schemas may run seeds side by side; go
	// test's -parallel (GOMAXPROCS by default) caps how many run at once,
	// and a worker that starts after the seeds ran out makes no schema.
	diffWorkers = 4
	// diffMinCoverageSeeds is the run size from which the test also
	// requires every operation to have reached its interesting outcomes
	// (the rarest, a rejected fence, takes about a hundred seeds).
	diffMinCoverageSeeds = 200
)

// TestRandomSequencesMatchMemstore runs seeded random sequences of calls,
// covering every operation of both contracts, against a fresh memstore and
// a fresh pgstore, and requires the same answers (errors by class, tokens
// by the grant they belong to) and, after every write, the same records;
// at the end of a sequence, and before every purge, the same history of
// every record, and at the end the same stats.
// memstore is the reference: the message of a failing seed names the seed,
// the step, the call, the command that replays it, and the whole op log.
func TestRandomSequencesMatchMemstore(t *testing.T) {
	// Beside the other runs of whole suites: they mostly wait on the server.
	t.Parallel()
	pgtest.DSN(t) // skips here, not in every worker, without a database
	seeds := diffSeedList()
	next := make(chan uint64, len(seeds))
	for _, s := range seeds {
		next <- s
	}
	close(next)
	cov := &diffCoverage{counts: map[string]int{}}
	var failed atomic.Bool
	var passed atomic.Int64
	start := time.Now()
	t.Run("workers", func(t *testing.T) {
		for w := range min(diffWorkers, len(seeds)) {
			t.Run(fmt.Sprintf("w%d", w), func(t *testing.T) {
				t.Parallel()
				var wk *diffWorker // made on the first seed: go test's -parallel may leave none
				for seed := range next {
					if failed.Load() {
						return // one failing seed is enough to read; stop the others
					}
					if wk == nil {
						wk = newDiffWorker(t)
					}
					if t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { wk.runSeed(t, seed, cov) }) {
						passed.Add(1)
					} else {
						failed.Store(true)
					}
				}
			})
		}
	})
	t.Logf("%d seeds of %d steps in %s", len(seeds), diffSteps, time.Since(start).Round(time.Millisecond))
	if passed.Load() < diffMinCoverageSeeds || passed.Load() < int64(len(seeds)) {
		return
	}
	cov.log(t)
	for _, want := range diffMustReach {
		assert.Positive(t, cov.counts[want], "no sequence reached %q: the generator no longer exercises it", want)
	}
}

// diffSeedList returns the seeds to run: -diff.seed alone, or 1..N.
func diffSeedList() []uint64 {
	if *diffSeed != 0 {
		return []uint64{*diffSeed}
	}
	n := *diffSeeds
	if testing.Short() && !diffFlagSet("diff.seeds") {
		n = 25
	}
	seeds := make([]uint64, 0, n)
	for s := 1; s <= n; s++ {
		seeds = append(seeds, uint64(s))
	}
	return seeds
}

func diffFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// diffWorker is one migrated schema that runs seeds one after the other,
// emptied between them: cheaper than a schema per seed.
type diffWorker struct {
	pg   *pgstore.Store
	pool *pgxpool.Pool
	// empty deletes every row of the store's tables. DELETE, not
	// TRUNCATE: for the few dozen rows of a sequence it takes well under a
	// millisecond, where TRUNCATE, which gives every table and index a new
	// file, took about 27 ms per seed here (5 s of a 200-seed run).
	empty string
	// now is the logical clock of the running seed. Both stores' clock
	// options read it, so the outbox methods without a now stamp alike.
	now time.Time
}

func newDiffWorker(t *testing.T) *diffWorker {
	w := &diffWorker{now: t0}
	w.pg, w.pool = newStore(t, pgstore.WithClock(func() time.Time { return w.now }))
	// Every table but the migration log, read from the catalog so that a
	// table added by a later migration is emptied too.
	rows, err := w.pool.Query(testContext(t), `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'
		ORDER BY table_name`, w.pg.Schema())
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for i, n := range names {
		names[i] = pgx.Identifier{w.pg.Schema(), n}.Sanitize()
	}
	w.empty = "DELETE FROM " + strings.Join(names, "; DELETE FROM ")
	return w
}

// runSeed runs one sequence against an emptied pgstore and a new memstore.
func (w *diffWorker) runSeed(t *testing.T, seed uint64, cov *diffCoverage) {
	ctx := testContext(t)
	_, err := w.pool.Exec(ctx, w.empty)
	require.NoError(t, err)
	w.now = t0.Add(time.Duration(seed%997) * time.Nanosecond)
	mem := memstore.New(memstore.WithClock(func() time.Time { return w.now }))
	r := &diffRun{
		t: t, ctx: ctx, seed: seed, w: w,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		sides: [2]*diffSide{
			newDiffSide("memstore", mem, mem, mem.Outbox(), mem.Outbox()),
			newDiffSide("pgstore", w.pg, w.pg, w.pg.Outbox(), w.pg.Outbox()),
		},
		latestLease: map[string]int64{},
		latestClaim: map[string]int64{},
		fences:      map[ledger.Target]ledger.Fence{},
		counts:      map[string]int{},
	}
	r.drawContent()
	r.drawSwarm()
	for i := range diffSteps {
		r.step(i)
	}
	r.checkAll(diffSteps, "the final state")
	r.compareHistories(diffSteps, "the final state")
	r.compareStats(diffSteps, "the final state")
	cov.add(r.counts)
}

// diffSide is one store under test with every lease and claim it handed
// out, by (ID, seq), and a label for each of their tokens.
type diffSide struct {
	name   string
	l      ledger.Ledger
	b      ledger.BatchEnqueuer
	o      ledger.ClaimStore
	ob     ledger.OutboxBatchEnqueuer
	leases map[grantKey]ledger.Lease
	claims map[grantKey]ledger.Claim
	labels map[ledger.Token]ledger.Token
}

// grantKey names one logical lease or claim, the same on both sides.
type grantKey struct {
	id  string
	seq int64
}

func (k grantKey) String() string { return fmt.Sprintf("%s#%d", k.id, k.seq) }

func newDiffSide(name string, l ledger.Ledger, b ledger.BatchEnqueuer, o ledger.ClaimStore, ob ledger.OutboxBatchEnqueuer) *diffSide {
	return &diffSide{
		name: name, l: l, b: b, o: o, ob: ob,
		leases: map[grantKey]ledger.Lease{},
		claims: map[grantKey]ledger.Claim{},
		labels: map[ledger.Token]ledger.Token{},
	}
}

// label replaces a token the side handed out by the name of its grant;
// other tokens (the forged ones, the same on both sides) stay.
func (s *diffSide) label(tok ledger.Token) ledger.Token {
	if l, ok := s.labels[tok]; ok {
		return l
	}
	return tok
}

func (s *diffSide) rememberLeases(lr ledger.LeaseResult) {
	for _, ld := range lr.Leased {
		k := grantKey{string(ld.Lease.DeliveryID), ld.Lease.Seq}
		s.leases[k] = ld.Lease
		s.labels[ld.Lease.Token] = ledger.Token("lease " + k.String())
	}
}

func (s *diffSide) rememberClaims(cs []ledger.ClaimedEntry) {
	for _, c := range cs {
		k := grantKey{string(c.Claim.EntryID), c.Claim.Seq}
		s.claims[k] = c.Claim
		s.labels[c.Claim.Token] = ledger.Token("claim " + k.String())
	}
}

// diffOp is one drawn call, applied to each side in turn. run must not
// draw from the generator: both sides get exactly the same call.
type diffOp struct {
	name  string // the operation, for the coverage counts
	desc  string // the call and its arguments, for the op log
	write diffWrites
	// keys are the outbox entries the call names, for writesEntries.
	keys []string
	run  func(s *diffSide) (any, error)
}

// diffWrites says which records a call may change, to compare after it.
type diffWrites int

const (
	writesNothing diffWrites = iota
	// writesDeliveries: any delivery (all of them are listed after).
	writesDeliveries
	// writesEntries: the entries of diffOp.keys.
	writesEntries
	// writesPending and writesRetryReady: any entry a claim could take
	// (FindPending or FindRetryReady is compared after); writesDue, both.
	writesPending
	writesRetryReady
	writesDue
)

// diffRun is the state of one seed: the generator, the two sides, what
// the generator remembers to aim its calls, and the op log.
type diffRun struct {
	t    *testing.T
	ctx  context.Context
	seed uint64
	w    *diffWorker
	rng  *rand.Rand

	sides [2]*diffSide
	// canon and envs are the seed's usual content per delivery ID and per
	// idempotency key, so that enqueues repeat each other.
	canon map[ledger.DeliveryID]ledger.EnqueueRequest
	envs  map[string]ledger.Envelope
	// deliveryIDs and entryIDs are the record IDs grants are drawn for;
	// keyNames names entry IDs by their key in the op log.
	deliveryIDs, entryIDs []string
	keyNames              map[string]string
	// leaseKeys and claimKeys list every grant in order (from memstore's
	// answers; pgstore's must be equal); latest* the newest per record.
	leaseKeys   []grantKey
	latestLease map[string]int64
	claimKeys   []grantKey
	latestClaim map[string]int64
	// fences is the highest fence accepted per target so far.
	fences map[ledger.Target]ledger.Fence
	// gens are the calls this seed draws from (see drawSwarm).
	gens   []diffGen
	log    []string
	counts map[string]int
}

// step advances the clock, draws one call, applies it to both sides and
// compares the answers and then the records it may have changed.
func (r *diffRun) step(i int) {
	r.advance()
	op := r.draw()
	r.log = append(r.log, fmt.Sprintf("%3d  now=%s  %s", i, atT0(r.w.now), op.desc))
	if strings.HasPrefix(op.name, "Purge") {
		// A purge takes histories with it: compare them while they last.
		r.compareHistories(i, "the histories before the call")
	}
	var res [2]any
	var errs [2]error
	for k, s := range r.sides {
		res[k], errs[k] = op.run(s)
	}
	r.compare(i, "the answer", res, errs)
	r.note(res[0])
	for _, o := range outcomesOf(res[0], errs[0]) {
		r.counts[op.name+" "+o]++
	}
	const after = "the records after the call"
	switch op.write {
	case writesDeliveries:
		r.compareDeliveries(i, after)
	case writesEntries:
		r.compareEntries(i, after, op.keys)
	case writesPending:
		r.compareRead(i, after, "FindPending", r.findPending)
	case writesRetryReady:
		r.compareRead(i, after, "FindRetryReady", r.findRetryReady)
	case writesDue:
		r.compareRead(i, after, "FindRetryReady", r.findRetryReady)
		r.compareRead(i, after, "FindPending", r.findPending)
	}
}

// compare fails the seed unless both sides answered alike.
func (r *diffRun) compare(step int, what string, res [2]any, errs [2]error) {
	r.t.Helper()
	ea, eb := errClass(errs[0]), errClass(errs[1])
	if ea != eb || strings.HasPrefix(ea, "store failure") {
		r.t.Fatalf("errors differ: memstore %s, pgstore %s\n%s", classOrNil(ea), classOrNil(eb), r.failure(step, what))
	}
	if ea != "" {
		return // both rejected the call alike; what came with the error is unspecified
	}
	want := maskWith(res[0], r.sides[0].label)
	got := maskWith(res[1], r.sides[1].label)
	require.Equal(r.t, want, got, r.failure(step, what))
}

func classOrNil(class string) string {
	if class == "" {
		return "nil"
	}
	return class
}

func (r *diffRun) failure(step int, what string) string {
	call := "(after the last step)"
	if step < len(r.log) {
		call = r.log[step]
	}
	return fmt.Sprintf("seed %d, step %d of %d: memstore (expected) and pgstore (actual) differ on %s of\n%s\n"+
		"replay: go test ./pgstore -run TestRandomSequencesMatchMemstore -diff.seed=%d -v\nop log of seed %d:\n%s",
		r.seed, step, diffSteps, what, call, r.seed, r.seed, strings.Join(r.log, "\n"))
}

// compareDeliveries compares every delivery (there are at most six).
func (r *diffRun) compareDeliveries(step int, what string) {
	var res [2]any
	var errs [2]error
	for k, s := range r.sides {
		p, err := s.l.List(r.ctx, ledger.ListQuery{Limit: ledger.MaxLimit})
		res[k], errs[k] = []ledger.Page{p}, err
	}
	r.compare(step, what+" (List)", res, errs)
}

// compareEntries compares the outbox entries of keys, present or not.
func (r *diffRun) compareEntries(step int, what string, keys []string) {
	for _, key := range keys {
		var res [2]any
		var errs [2]error
		for k, s := range r.sides {
			res[k], errs[k] = s.o.FindByID(r.ctx, ledger.OutboxEntryIDFor(key))
		}
		r.compare(step, fmt.Sprintf("%s (FindByID %s)", what, key), res, errs)
	}
}

// checkAll compares every record at the end of a sequence, through
// every read path.
func (r *diffRun) checkAll(step int, what string) {
	r.compareDeliveries(step, what)
	r.compareEntries(step, what, diffKeys)
	r.compareRead(step, what, "Get", func(s *diffSide) (any, error) {
		var ds []any
		for _, id := range diffIDs {
			d, err := s.l.Get(r.ctx, id)
			ds = append(ds, maskWith(d, s.label), errClass(err))
		}
		return ds, nil
	})
	r.compareRead(step, what, "FindPending", r.findPending)
	r.compareRead(step, what, "FindRetryReady", r.findRetryReady)
}

// compareRead compares what read answers on both sides.
func (r *diffRun) compareRead(step int, what, name string, read func(s *diffSide) (any, error)) {
	var res [2]any
	var errs [2]error
	for k, s := range r.sides {
		res[k], errs[k] = read(s)
	}
	r.compare(step, what+" ("+name+")", res, errs)
}

func (r *diffRun) findPending(s *diffSide) (any, error) {
	return s.o.FindPending(r.ctx, ledger.MaxLimit)
}

func (r *diffRun) findRetryReady(s *diffSide) (any, error) {
	return s.o.FindRetryReady(r.ctx, storekit.MaxTime(), ledger.MaxLimit)
}

// note remembers what memstore's answer handed out or accepted, to aim
// later calls: grants by (ID, seq) and the fences accepted per target.
func (r *diffRun) note(res any) {
	switch v := res.(type) {
	case ledger.LeaseResult:
		for _, ld := range v.Leased {
			r.leaseKeys = append(r.leaseKeys, grantKey{string(ld.Lease.DeliveryID), ld.Lease.Seq})
			r.latestLease[string(ld.Lease.DeliveryID)] = ld.Lease.Seq
		}
	case []ledger.ClaimedEntry:
		for _, c := range v {
			r.claimKeys = append(r.claimKeys, grantKey{string(c.Claim.EntryID), c.Claim.Seq})
			r.latestClaim[string(c.Claim.EntryID)] = c.Claim.Seq
		}
	case ackProcessedAnswer:
		r.note(v.Processed)
	case ledger.DeliveryResult:
		if p := v.Delivery.Processing; v.Applied() && v.Delivery.State == ledger.DeliveryStateProcessed && p.Fence != nil {
			if f, ok := r.fences[v.Delivery.Target]; !ok || *p.Fence > f {
				r.fences[v.Delivery.Target] = *p.Fence
			}
		}
	}
}

// outcomesOf names what a call achieved, for the coverage counts.
func outcomesOf(res any, err error) []string {
	if c := errClass(err); c != "" {
		return []string{strings.SplitN(c, "(", 2)[0]}
	}
	some := func(n int, yes string) []string {
		if n > 0 {
			return []string{yes}
		}
		return []string{"none"}
	}
	switch v := res.(type) {
	case ackProcessedAnswer:
		return []string{"ack " + string(v.Ack.Outcome), "processed " + string(v.Processed.Outcome)}
	case ledger.DeliveryResult:
		return []string{string(v.Outcome)}
	case []ledger.DeliveryResult:
		var out []string
		for _, d := range v {
			out = append(out, string(d.Outcome))
		}
		return out
	case ledger.OutboxResult:
		return []string{string(v.Outcome)}
	case []ledger.OutboxResult:
		var out []string
		for _, e := range v {
			out = append(out, string(e.Outcome))
		}
		return out
	case ledger.LeaseResult:
		out := some(len(v.Leased), "granted")
		if len(v.Reclaimed) > 0 {
			out = append(out, "reclaimed")
		}
		return out
	case ledger.SweepResult:
		return some(len(v.Changed), "changed")
	case ledger.SupersedeResult:
		return append(some(len(v.Moved), "moved"), some(len(v.Ended), "ended")...)
	case []ledger.ClaimedEntry:
		return some(len(v), "claimed")
	case purged:
		return some(int(v), "purged")
	}
	return []string{"ok"}
}

// diffMustReach lists outcomes a full run must reach at least once, so a
// generator that drifts into calls that never apply fails loudly.
var diffMustReach = []string{
	"Enqueue applied", "Enqueue repeated", "Enqueue conflict", "EnqueueBatch applied", "EnqueueBatch ErrInvalid",
	"Lease granted", "Lease reclaimed", "Lease ErrInvalid",
	"Acknowledge applied", "Acknowledge repeated", "Acknowledge lease_lost", "Acknowledge lease_expired", "Acknowledge ended",
	"MarkProcessed applied", "MarkProcessed repeated", "MarkProcessed wrong_owner", "MarkProcessed wrong_state",
	"MarkProcessed fence_rejected", "MarkProcessed ended",
	"MarkFailed applied", "MarkFailed repeated", "MarkFailed wrong_state", "MarkFailed lease_lost",
	"Release applied", "Release repeated", "RecordActivation applied", "RecordActivation ended",
	"Expire changed", "Abandon applied", "Abandon ended", "ExpireCeremony changed", "Supersede moved", "Supersede ended",
	"Get ok", "Get ErrNotFound", "List ok", "List ErrInvalid",
	"Outbox.Enqueue applied", "Outbox.Enqueue repeated", "Outbox.Enqueue conflict", "Outbox.EnqueueBatch applied",
	"Save ok", "Save ErrConflict", "Save ErrNotFound", "FindByID ok", "FindPending ok", "FindRetryReady ok",
	"Outbox.MarkDelivered ok", "Outbox.MarkDelivered ErrConflict", "Outbox.MarkFailed ok", "Outbox.MarkDeadLettered ok",
	"ClaimPending claimed", "ClaimRetryReady claimed",
	"MarkClaimDelivered applied", "MarkClaimDelivered ended", "MarkClaimFailed applied", "MarkClaimFailed repeated",
	"MarkClaimFailed lease_lost", "MarkClaimDeadLettered applied", "ReleaseClaim applied", "ReleaseClaim repeated",
	"SaveClaim applied", "SaveClaim lease_lost", "PurgeDeliveries purged", "PurgeEntries purged",
}

// diffCoverage adds up the outcomes reached by all seeds.
type diffCoverage struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *diffCoverage) add(counts map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range counts {
		c.counts[k] += n
	}
}

func (c *diffCoverage) log(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c.counts)) {
		fmt.Fprintf(&b, "\n  %-45s %6d", k, c.counts[k])
	}
	t.Logf("outcomes reached:%s", b.String())
}

// errMissingGrant: a side was asked for a grant it never handed out,
// which means an earlier answer already differed.
var errMissingGrant = errors.New("no such grant on this side")

// atT0 prints a logical time relative to t0, nanoseconds included.
func atT0(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return "t0+" + t.Sub(t0).String()
}
