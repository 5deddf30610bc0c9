package ledger

import (
	"context"
	"time"
)

// This file holds the optional read interfaces that operators' tools (the
// console, ledgerctl) page through: the outbox's entries, and the records
// that ended in a window of time, latest first, for a chart of
// completions and failures.

// OutboxLister is implemented by outbox stores that can page through their
// entries, as Ledger.List pages through deliveries. Detect it with a type
// assertion.
//
// ListEntries returns one page of the entries matching q, in ID order
// (byte order), with an opaque cursor for the next page. Entries inserted
// while paging appear on a later page when their ID sorts after the
// cursor; no entry appears twice. A cursor made by Ledger.List is not an
// outbox cursor: ListEntries answers ErrInvalid for it. Errors: ErrInvalid
// for a malformed query, ctx.Err(), and store errors.
type OutboxLister interface {
	ListEntries(ctx context.Context, q OutboxListQuery) (OutboxPage, error)
}

// OutboxListQuery selects one page of ListEntries. Empty filters match
// everything; a filter with several values matches any of them.
type OutboxListQuery struct {
	Providers []string
	Statuses  []OutboxStatus
	// IdempotencyKey, when not empty, keeps only the entries enqueued
	// with this key: the name the business knows an entry by. An entry's
	// ID is usually OutboxEntryIDFor its key, but a redriven entry's is
	// derived from its new key and a Save may keep a caller's own ID, so
	// a lookup by key is a query of its own; stores answer it through an
	// index of keys.
	IdempotencyKey string
	// Limit is the page size, 1 to MaxLimit.
	Limit int
	// Cursor is OutboxPage.Next of the previous page; empty for the first.
	Cursor string
}

// OutboxPage is one page of ListEntries.
type OutboxPage struct {
	Entries []OutboxEntry
	// Next is the cursor for the next page; empty when this page is the last.
	Next string
}

// Matches reports whether ListEntries with q's filters returns e.
func (q OutboxListQuery) Matches(e OutboxEntry) bool {
	return (len(q.Providers) == 0 || contains(q.Providers, e.Envelope.Provider)) &&
		(len(q.Statuses) == 0 || contains(q.Statuses, e.Status)) &&
		(q.IdempotencyKey == "" || e.Envelope.IdempotencyKey == q.IdempotencyKey)
}

// Matches reports whether List with q's filters returns d.
func (q ListQuery) Matches(d Delivery) bool {
	return (q.Ceremony == "" || d.Ceremony == q.Ceremony) &&
		(len(q.Targets) == 0 || contains(q.Targets, d.Target)) &&
		(len(q.States) == 0 || contains(q.States, d.State))
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// EndedQuery selects the records whose EndedAt lies in [Since, Until),
// latest first, at most Limit of them. A store reads them through its
// index of ended records, so the cost of a query is bounded by Limit,
// whatever the number of records that ended.
type EndedQuery struct {
	Since, Until time.Time
	// Limit is 1 to MaxEndedLimit. When a query returns Limit records,
	// records that ended earlier in the window may be left out: the
	// answer then covers [its last EndedAt, Until) only.
	Limit int
}

// DeliveryEnd is how one delivery ended: the fields of a terminal
// Delivery that a chart of completions and failures counts.
type DeliveryEnd struct {
	ID     DeliveryID    `json:"id"`
	Target Target        `json:"target"`
	State  DeliveryState `json:"state"`
	// Cause is the kind of an Expired delivery's cause; empty otherwise.
	Cause   CauseKind `json:"cause,omitempty"`
	EndedAt time.Time `json:"ended_at"`
}

// EntryEnd is how one outbox entry ended.
type EntryEnd struct {
	ID       OutboxEntryID `json:"id"`
	Provider string        `json:"provider"`
	Status   OutboxStatus  `json:"status"`
	EndedAt  time.Time     `json:"ended_at"`
}

// EndedLister is implemented by ledgers that can list the deliveries that
// ended in a window of time. Detect it with a type assertion.
//
// ListEnded returns the deliveries whose EndedAt lies in [q.Since,
// q.Until), latest EndedAt first (ties by ID, greatest first), at most
// q.Limit; an empty slice when there are none. Errors: ErrInvalid for a
// malformed query, ctx.Err(), and store errors.
type EndedLister interface {
	ListEnded(ctx context.Context, q EndedQuery) ([]DeliveryEnd, error)
}

// OutboxEndedLister is EndedLister for outbox entries.
type OutboxEndedLister interface {
	ListEndedEntries(ctx context.Context, q EndedQuery) ([]EntryEnd, error)
}

// End returns how d ended, and false when d is open.
func (d Delivery) End() (DeliveryEnd, bool) {
	if !d.State.Terminal() {
		return DeliveryEnd{}, false
	}
	e := DeliveryEnd{ID: d.ID, Target: d.Target, State: d.State, EndedAt: d.EndedAt}
	if d.State == DeliveryStateExpired && d.Cause != nil {
		e.Cause = d.Cause.Kind
	}
	return e, true
}

// End returns how e ended, and false when e is open.
func (e OutboxEntry) End() (EntryEnd, bool) {
	if !e.Status.Terminal() {
		return EntryEnd{}, false
	}
	return EntryEnd{ID: e.ID, Provider: e.Envelope.Provider, Status: e.Status, EndedAt: e.EndedAt}, true
}

// Includes reports whether a record that ended at endedAt lies in q's
// window.
func (q EndedQuery) Includes(endedAt time.Time) bool {
	return !endedAt.Before(Normalize(q.Since)) && endedAt.Before(Normalize(q.Until))
}
