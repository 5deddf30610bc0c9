package pgstore

import (
	"context"
	"time"

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
	// commitLanded: the row is exactly what the transaction wrote, its
	// version and its time.
	commitLanded
	// commitLost: the row is still at the version the transaction found,
	// so nothing of the transaction committed (it wrote all its rows or
	// none), and the call can be decided again.
	commitLost
)

// stamp is what identifies one write of a record: the version it gave
// the record and the time it was stamped with. Two writes of one record
// that give it the same version both started from the version before,
// and only one of them can commit (the row lock and the version check of
// every write-back see to it), so a row at the version a transaction
// wrote, with its time, is that transaction's write.
type stamp struct {
	version int64
	at      time.Time
}

func (a stamp) is(b stamp) bool { return a.version == b.version && a.at.Equal(b.at) }

func deliveryStamp(d ledger.Delivery) stamp { return stamp{d.Version, d.UpdatedAt} }
func entryStamp(e ledger.OutboxEntry) stamp { return stamp{e.Version, e.UpdatedAt} }

// settleCommit reads record id of kind k under its lock, as a statement
// of its own on the pool, and judges a commit that found the record at
// version before and wrote wrote. It returns the record as read when the
// commit landed. A read that fails (ctx done, the server still away
// after the retries) leaves the outcome unknown.
func settleCommit[R any](ctx context.Context, s *Store, k *recordKind[R], id string, before int64, wrote stamp) (R, commitVerdict) {
	var zero R
	for n := 0; ; n++ {
		r, found, err := readLocked(ctx, s, k, id)
		switch {
		case err == nil && !found:
			return zero, commitUnknown
		case err == nil:
			got := k.stamp(r)
			switch {
			case got.is(wrote):
				return r, commitLanded
			case got.version == before:
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
