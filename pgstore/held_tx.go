package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file writes the transitions decided on held records (held.go): a
// group of them, or a single call, is one statement, a transaction of its
// own in one round trip, its parameters binary arrays written by the store
// (arraySender, params.go). The statement updates the rows still
// at the held version and token, appending their history entries, and
// writes the count changes of exactly those rows; the calls whose row moved on are
// decided again the ordinary way.

// heldTail is what the held write of one kind of record names beside its
// table: the column holding the token in force, and the counts table
// with its key columns (and their SQL types), n last.
type heldTail struct {
	token      string
	counts     string
	countKeys  []string
	countTypes []string
}

// positionBit in the mask of a held write says that the position of
// every held version is known (position.go): the statement then takes
// them as $4 and finds its rows there, a TID scan of one page a row,
// rather than through the primary key. A held copy whose position is
// not known (the ordinary path wrote it) makes its group go by ID.
const positionBit = uint64(1) << 62

// heldStatement returns the held write of the columns in mask (bit j:
// column j of t): $1 the IDs, $2 the versions and $3 the tokens held,
// with positionBit $4 their positions, one array per column in mask,
// then, when mask has historyBit, the history entries to append
// (historyLog.of), and the count changes: the ID, one array per key
// column and the change. It returns the ID of each row it wrote and the
// position of the version it wrote there.
//
// The rows are found from the arrays by their positions, matching the
// ID too, or through the primary key, as in bulkTable.statement
// (unnestIDs). A position names the version the store wrote last; a
// row that moved on since has another version elsewhere, and the
// statement leaves it alone as it would at the held version's check.
// The token is compared with IS NOT DISTINCT FROM, never NULL on either
// side here, because an equality would let the planner prove the
// predicate of the partial index of claims (or leases) and read every
// claim in force to find a group's few.
func (t *bulkTable) heldStatement(mask uint64, tail *heldTail) arrayStatement {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.held[mask]; ok {
		return st
	}
	params := []string{"$1::text[]", "$2::bigint[]", "$3::text[]"}
	aliases := []string{"id", "read_version", "read_token"}
	found := "t.id = u.id"
	if mask&positionBit != 0 {
		params, aliases = append(params, "$4::tid[]"), append(aliases, "tid")
		found = "t.ctid = u.tid AND t.id = u.id"
	}
	var sets []string
	for j, name := range t.names {
		if mask&(1<<j) == 0 {
			continue
		}
		params = append(params, fmt.Sprintf("$%d::%s[]", len(params)+1, t.types[j]))
		aliases = append(aliases, name)
		sets = append(sets, name+" = u."+name)
	}
	if mask&historyBit != 0 {
		params = append(params, fmt.Sprintf("$%d::text[]", len(params)+1))
		aliases = append(aliases, "hist")
		sets = append(sets, historyAppend("t", "u.hist"))
	}
	n := len(params)
	p := func(i int, typ string) string { return fmt.Sprintf("$%d::%s[]", n+i, typ) }
	countParams := []string{p(1, "text")}
	for i, typ := range tail.countTypes {
		countParams = append(countParams, p(2+i, typ))
	}
	countParams = append(countParams, p(2+len(tail.countTypes), "bigint"))
	keys := strings.Join(tail.countKeys, ", ")
	sql := "WITH upd AS (UPDATE " + t.table + " AS t SET " + strings.Join(sets, ", ") +
		" FROM " + unnestIDs(params, aliases) +
		" WHERE " + found + " AND t.version = u.read_version AND t." + tail.token + " IS NOT DISTINCT FROM u.read_token RETURNING t.id, t.ctid AS tid)," +
		" cnt AS (INSERT INTO " + tail.counts + " AS c (" + keys + ", n) SELECT " + keys + ", sum(k.n)::bigint FROM unnest(" +
		strings.Join(countParams, ", ") + ") AS k(id, " + keys + ", n) WHERE k.id IN (SELECT id FROM upd)" +
		" GROUP BY " + keys + " HAVING sum(k.n) <> 0 ORDER BY " + keys +
		" ON CONFLICT (" + keys + ") DO UPDATE SET n = c.n + excluded.n)" +
		" SELECT id, tid FROM upd"
	st := newArrayStatement(sql)
	if len(t.held) < maxBulkStatements {
		t.held[mask] = st
	}
	return st
}

// heldWrite is the held write of one group: per applied call, the
// version and token held and the record the call leaves, with the
// columns that differ from the held record (mask) and the history
// entries and count changes.
type heldWrite[R any] struct {
	kind     *recordKind[R]
	tail     *heldTail
	ids      []string
	tokens   []string
	pos      []tuplePos       // by call: where the held version lies
	versions map[string]int64 // as held
	last     map[string]R
	mask     uint64
	hist     *historyLog
	counts   heldCounts
	// held and after map a held record and the record a call leaves to
	// their rows, one at a time (recordKind.reuse): the rows are compared
	// when a call is added and written into the arrays when the statement
	// is built, so that no row of a group is kept.
	held, after func(R) ([]column, error)
}

func newHeldWrite[R any](k *recordKind[R], tail *heldTail, counts heldCounts, noHistory bool) *heldWrite[R] {
	return &heldWrite[R]{kind: k, tail: tail, counts: counts, hist: newHistoryLog(noHistory),
		versions: map[string]int64{}, last: map[string]R{}, held: k.reuse(), after: k.reuse()}
}

// add records the write of after over held, whose claim or lease token
// is token and whose version lies at pos, and the columns it changes.
func (w *heldWrite[R]) add(id, token string, pos tuplePos, held, after R) error {
	before, err := w.held(held)
	if err != nil {
		return err
	}
	cols, err := w.after(after)
	if err != nil {
		return err
	}
	for j := 1; j < len(cols); j++ {
		if w.mask&(1<<j) == 0 && !sameValue(before[j].ptr, cols[j].ptr) {
			w.mask |= 1 << j
		}
	}
	version := len(cols) - 1
	w.ids = append(w.ids, id)
	w.tokens = append(w.tokens, token)
	w.pos = append(w.pos, pos)
	w.versions[id] = *before[version].ptr.(*int64)
	w.last[id] = after
	return nil
}

// heldCounts collects count changes by record, for the held write to
// keep those of the rows it wrote.
type heldCounts interface {
	arrays() []binArray
}

// errHeldUnknown wraps the error of a held write whose outcome is
// unknown.
func errHeldUnknown(err error) error {
	return fmt.Errorf("%w (the outcome of its commit is unknown: the call may have applied)", err)
}

// statement returns the statement of w and its parameters, binary
// arrays (heldStatement says which).
func (w *heldWrite[R]) statement() (arrayStatement, [][]byte, error) {
	t := w.kind.table
	mask := w.mask | 1<<(len(t.names)-1) // the version: always written, the guard of the next write
	versions := make([]int64, len(w.ids))
	for i, id := range w.ids {
		versions[i] = w.versions[id]
	}
	arrays := []binArray{textArray(w.ids), int8Array(versions), textArray(w.tokens)}
	if !slices.ContainsFunc(w.pos, func(p tuplePos) bool { return !p.known() }) {
		mask |= positionBit
		arrays = append(arrays, tidArray(w.pos))
	}
	fixed := len(arrays)
	var written []int // the columns written, in order
	for j := 1; j < len(t.names); j++ {
		if mask&(1<<j) != 0 {
			written = append(written, j)
			arrays = append(arrays, newBinArray(typeOID(t.types[j]), len(w.ids), 16))
		}
	}
	columns := arrays[fixed:]
	for _, id := range w.ids {
		cols, err := w.after(w.last[id])
		if err != nil {
			return arrayStatement{}, nil, err
		}
		for k, j := range written {
			columns[k].value(cols[j])
		}
	}
	if len(w.hist.byID) > 0 {
		mask |= historyBit
		a := newBinArray(oidText, len(w.ids), 64)
		for _, id := range w.ids {
			h := w.hist.of(id)
			a.value(column{"history", &h})
		}
		arrays = append(arrays, a)
	}
	arrays = append(arrays, w.counts.arrays()...)
	params, err := finishArrays(arrays)
	if err != nil {
		return arrayStatement{}, nil, err
	}
	return t.heldStatement(mask, w.tail), params, nil
}

// heldEntryCounts are the count changes of a held write of entries.
type heldEntryCounts struct {
	ids, statuses []string
	shards        []int16
	ns            []int64
}

func (c *heldEntryCounts) change(before, after *ledger.OutboxEntry) {
	for _, x := range []struct {
		e *ledger.OutboxEntry
		n int64
	}{{before, -1}, {after, 1}} {
		if x.e.Status.Terminal() {
			c.ids = append(c.ids, string(x.e.ID))
			c.statuses = append(c.statuses, string(x.e.Status))
			c.shards = append(c.shards, shardOf(string(x.e.ID)))
			c.ns = append(c.ns, x.n)
		}
	}
}

func (c *heldEntryCounts) arrays() []binArray {
	return []binArray{textArray(c.ids), textArray(c.statuses), int2Array(c.shards), int8Array(c.ns)}
}

// heldDeliveryCounts are the count changes of a held write of deliveries.
type heldDeliveryCounts struct {
	ids, targets, ceremonies, states, causes []string
	shards                                   []int16
	ns                                       []int64
}

func (c *heldDeliveryCounts) change(before, after *ledger.Delivery) {
	for _, x := range []struct {
		d *ledger.Delivery
		n int64
	}{{before, -1}, {after, 1}} {
		d := x.d
		if !d.State.Terminal() {
			continue
		}
		cause := ""
		if d.State == ledger.DeliveryStateExpired && d.Cause != nil {
			cause = string(d.Cause.Kind)
		}
		c.ids = append(c.ids, string(d.ID))
		c.targets = append(c.targets, string(d.Target))
		c.ceremonies = append(c.ceremonies, string(d.Ceremony))
		c.states = append(c.states, string(d.State))
		c.causes = append(c.causes, cause)
		c.shards = append(c.shards, shardOf(string(d.ID)))
		c.ns = append(c.ns, x.n)
	}
}

func (c *heldDeliveryCounts) arrays() []binArray {
	return []binArray{textArray(c.ids), textArray(c.targets), textArray(c.ceremonies), textArray(c.states),
		textArray(c.causes), int2Array(c.shards), int8Array(c.ns)}
}

// heldOutcome is what the held path did with one call: decided it (res,
// or err when the outcome of its commit is unknown), or left it for the
// ordinary path.
type heldOutcome[Res any] struct {
	decided bool
	res     Res
	err     error
}

// runHeldEntries decides the claim completions cs on held entries and
// writes the applied ones in one round trip. Calls it cannot decide that
// way (no held entry, a step that does not apply to the held copy, a row
// that moved on, several calls on one entry) are left undecided, for the
// ordinary path, which locks and reads the rows.
func (s *Store) runHeldEntries(ctx context.Context, cs []entryCompletion) []heldOutcome[ledger.OutboxResult] {
	out := make([]heldOutcome[ledger.OutboxResult], len(cs))
	if s.held == nil {
		return out
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = string(c.id)
	}
	shared := repeated(ids)
	now := ledger.Normalize(s.cfg.clock())
	k := s.held.entries
	counts := &heldEntryCounts{}
	w := newHeldWrite(k.kind, k.tail, counts, s.cfg.noHistory)
	picked := make([]int, 0, len(cs))
	for i, c := range cs {
		if shared[ids[i]] {
			continue
		}
		held, pos, ok := k.cache.get(ids[i])
		if !ok || held.Claim == nil {
			continue
		}
		next, outcome := c.apply(held, now)
		if outcome != ledger.OutcomeApplied {
			continue
		}
		if w.add(ids[i], string(held.Claim.Token), pos, held, next) != nil {
			continue
		}
		ch := entryChangeOf(c.h, held, next)
		w.hist.add(ids[i], ch.t)
		counts.change(&held, &next)
		picked = append(picked, i)
	}
	if len(picked) == 0 {
		return out
	}
	written, err := runHeldWrite(ctx, s, w)
	tried := func(i int) {
		e := w.last[ids[i]]
		cs[i].wrote = &e
	}
	settleHeld(out, picked, ids, written, err, k.cache.drop, heldVerdict(ctx, s, w, ids), tried, func(i int, pos tuplePos) ledger.OutboxResult {
		after := w.last[ids[i]]
		s.held.keepEntry(after, pos)
		return ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: after.Clone()}
	})
	return out
}

// settleHeld decides the picked calls of a held write from what
// runHeldWrite answered (written, err): a call whose row was written gets
// applied(i, the position written); with an error after which nothing
// was written, or a row that moved on (its held copy stale), the call is
// left to the ordinary path; with an error whose outcome is unknown, the
// call's row is read (verdict, settle.go): a row that is what the write
// made gets applied(i, an unknown position), a row still at the held
// version is left to the ordinary path, and anything else gets the
// error. Every call but the applied ones drops its record's held copy.
//
// tried(i) is called for every call left to the ordinary path after an
// error taken for "nothing committed", so that the ordinary path knows
// what the write wrote (deliveryCompletion.wrote).
func settleHeld[Res any](out []heldOutcome[Res], picked []int, ids []string, written map[string]tuplePos, err error, drop func(string),
	verdict func(i int) commitVerdict, tried func(i int), applied func(i int, pos tuplePos) Res) {
	for _, i := range picked {
		id := ids[i]
		pos, wrote := written[id]
		switch {
		case err != nil && written == nil:
			tried(i)
			drop(id)
		case err != nil:
			switch verdict(i) {
			case commitLanded:
				out[i] = heldOutcome[Res]{decided: true, res: applied(i, tuplePos{})}
			case commitLost:
				tried(i)
				drop(id)
			default:
				out[i] = heldOutcome[Res]{decided: true, err: err}
				drop(id)
			}
		case wrote:
			out[i] = heldOutcome[Res]{decided: true, res: applied(i, pos)}
		default:
			drop(id)
		}
	}
}

// heldVerdict returns the verdict function of settleHeld for w: the
// locking read of each call's row, judged against the held version and
// what the write made of it.
func heldVerdict[R any](ctx context.Context, s *Store, w *heldWrite[R], ids []string) func(i int) commitVerdict {
	return func(i int) commitVerdict {
		id := ids[i]
		_, v := settleCommit(ctx, s, w.kind, id, w.versions[id], w.last[id])
		return v
	}
}

// runHeldDeliveries decides the single-delivery transitions cs on held deliveries and
// writes the applied ones in one round trip. Calls it cannot decide that
// way (no held entry, a step that does not apply to the held copy, a row
// that moved on, several calls on one entry) are left undecided, for the
// ordinary path, which locks and reads the rows.
func (s *Store) runHeldDeliveries(ctx context.Context, cs []deliveryCompletion) []heldOutcome[ledger.DeliveryResult] {
	out := make([]heldOutcome[ledger.DeliveryResult], len(cs))
	if s.held == nil {
		return out
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = string(c.id)
	}
	shared := repeated(ids)
	k := s.held.deliveries
	counts := &heldDeliveryCounts{}
	w := newHeldWrite(k.kind, k.tail, counts, s.cfg.noHistory)
	var firsts []ledger.Delivery // by call: the record a call's first step left, when it has two
	picked := make([]int, 0, len(cs))
	for i, c := range cs {
		if shared[ids[i]] || c.fence != nil {
			// A fence is checked against its target's row, under that
			// row's lock: the ordinary path takes it.
			continue
		}
		held, pos, ok := k.cache.get(ids[i])
		if !ok || held.Lease == nil {
			continue
		}
		next, outcome := c.step(held, nil)
		if outcome != ledger.OutcomeApplied {
			continue
		}
		first := next
		steps := [2]ledger.Transition{transitionOf(c.h, held, next)}
		if c.then != nil {
			done, outcome := c.then(next, nil)
			if outcome != ledger.OutcomeApplied {
				continue
			}
			steps[1] = transitionOf(c.thenHow, next, done)
			next = done
		}
		if w.add(ids[i], string(held.Lease.Token), pos, held, next) != nil {
			continue
		}
		w.hist.add(ids[i], steps[0])
		if c.then != nil {
			w.hist.add(ids[i], steps[1])
			if firsts == nil {
				firsts = make([]ledger.Delivery, len(cs))
			}
			firsts[i] = first
		}
		counts.change(&held, &next)
		picked = append(picked, i)
	}
	if len(picked) == 0 {
		return out
	}
	written, err := runHeldWrite(ctx, s, w)
	tried := func(i int) {
		d := w.last[ids[i]]
		cs[i].wrote = &d
	}
	settleHeld(out, picked, ids, written, err, k.cache.drop, heldVerdict(ctx, s, w, ids), tried, func(i int, pos tuplePos) ledger.DeliveryResult {
		after := w.last[ids[i]]
		if cs[i].then != nil {
			*cs[i].first = ledger.DeliveryResult{Outcome: ledger.OutcomeApplied, Delivery: firsts[i].Clone()}
		}
		s.held.keepDelivery(after, pos)
		return ledger.DeliveryResult{Outcome: ledger.OutcomeApplied, Delivery: after.Clone()}
	})
	return out
}

// runHeldWrite writes w, retrying safely retryable failures like inTx.
// It returns the IDs written, each with the position of the version
// written; on an error it returns nil when nothing was written, or a
// non-nil empty set with an error that says the outcome is unknown.
func runHeldWrite[R any](ctx context.Context, s *Store, w *heldWrite[R]) (map[string]tuplePos, error) {
	st, params, err := w.statement()
	if err != nil {
		return nil, err
	}
	formats := arrayFormats(len(params), 0)
	for n := 0; ; n++ {
		var written map[string]tuplePos
		committing, err := s.onTrip(ctx, func(tctx context.Context, conn *pgx.Conn) (bool, error) {
			res, err := s.arrays.get().exec(tctx, conn, st, params, formats)
			if err != nil {
				return false, err
			}
			if res.Err != nil {
				if failedStatement(res.Err) {
					return false, res.Err // refused: nothing was written
				}
				return tripOutcome(nil, res.Err, nil)
			}
			written = make(map[string]tuplePos, len(res.Rows))
			for _, row := range res.Rows {
				written[string(row[0])] = parsePos(row[1])
			}
			return false, nil
		})
		if err == nil {
			return written, nil
		}
		if committing {
			return map[string]tuplePos{}, errHeldUnknown(err)
		}
		if n >= s.cfg.maxRetries || ctx.Err() != nil || !retryable(err) || backoff(ctx, n) != nil {
			return nil, err
		}
	}
}
