package pgstore

import (
	"context"

	"github.com/leaseledger/ledger"
)

// This file settles a commit whose outcome is unknown (see commitOutcome):
// COMMIT was sent and no answer came that says what became of it. The
// call is never decided again on a guess; the store reads what the
// transaction wrote and answers from that.
//
// The read locks the row (FOR UPDATE), on a connection of its own. The
// transaction in doubt updated that row before its COMMIT was sent, so
// while it has not ended, on a backend whose client is gone or behind a
// pooler that lost its link, it holds the row's lock and the read waits
// for its end: the read never sees the row as it was while the commit
// may still land. After a crash or a failover the server the read
// reaches knows the outcome from its log.

// commitVerdict is what the read of a written row says of the commit.
type commitVerdict int

const (
	// commitUnknown: the row does not tell (it moved on since, or it
	// could not be read); the call answers an error saying so.
	commitUnknown commitVerdict = iota
	// commitLanded: the row is exactly what the transaction wrote (same),
	// its version and its time among the rest.
	commitLanded
	// commitLost: the row is still at the version the transaction found,
	// so nothing of the transaction committed (it wrote all its rows or
	// none), and the call can be decided again.
	commitLost
)

// same reports whether a and b are the same record, column by column
// as the store writes them: the test of "the row is exactly what the
// write made", its version and its time among the rest. The version and
// the time alone would do in production, but another writer of the same
// version at the same instant (a sweep, with the caller's clock) is then
// told apart too.
func (k *recordKind[R]) same(a, b R) bool {
	ca, err := k.columns(a)
	if err != nil {
		return false
	}
	cb, err := k.columns(b)
	if err != nil || len(ca) != len(cb) {
		return false
	}
	for j := range ca {
		if !sameValue(ca[j].ptr, cb[j].ptr) {
			return false
		}
	}
	return true
}

func deliveryVersion(d ledger.Delivery) int64 { return d.Version }
func entryVersion(e ledger.OutboxEntry) int64 { return e.Version }

// settleCommit reads record id of kind k under its lock, as a statement
// of its own on the pool, and judges a commit that found the record at
// version before and wrote wrote. It returns the record as read when the
// commit landed. A read that fails (ctx done, the server still away
// after the retries) leaves the outcome unknown.
func settleCommit[R any](ctx context.Context, s *Store, k *recordKind[R], id string, before int64, wrote R) (R, commitVerdict) {
	var zero R
	for n := 0; ; n++ {
		r, found, err := readLocked(ctx, s, k, id)
		switch {
		case err == nil && !found:
			return zero, commitUnknown
		case err == nil:
			switch {
			case k.same(r, wrote):
				return r, commitLanded
			case k.version(r) == before:
				return zero, commitLost
			}
			return zero, commitUnknown
		}
		if n >= s.cfg.maxRetries || ctx.Err() != nil || !retryable(err) || backoff(ctx, n) != nil {
			return zero, commitUnknown
		}
	}
}

// readLocked reads record id of kind k with the group's locking read.
func readLocked[R any](ctx context.Context, s *Store, k *recordKind[R], id string) (_ R, found bool, _ error) {
	var r R
	rows, err := s.db.Query(ctx, k.lock, []string{id})
	if err != nil {
		return r, false, err
	}
	defer rows.Close()
	read := map[string][]column{}
	for rows.Next() {
		if r, err = k.scan(rows, read); err != nil {
			return r, false, err
		}
		found = true
	}
	return r, found, rows.Err()
}
