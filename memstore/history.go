package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores record history.
var (
	_ ledger.Historian       = (*Store)(nil)
	_ ledger.OutboxHistorian = (*Outbox)(nil)
)

// WithoutHistory switches history recording off for the Store and its
// Outbox: transitions then write no history entry, and History and
// EntryHistory answer an empty (non-nil) slice for every record they hold.
// A store that keeps millions of records and never reads their history
// saves the entries' memory and the time to write them.
func WithoutHistory() Option {
	return func(c *config) { c.noHistory = true }
}

// History keeps each record's transitions in memory, in the same critical
// section as the change they describe. An entry is built by the root
// package (storekit.DeliveryTransition, storekit.EntryTransition) and kept in a
// compact form, event, that shares its strings with the calls and records
// it came from and numbers nothing: an entry's Seq is its place in the
// record's list. Every applied transition bumps the record's Version by one
// and appends one entry, so the last Seq always equals the Version.
//
// The creation entry is not stored at all: every record starts the same
// way (Offered, or Pending, by OpEnqueue or, for a redriven record,
// OpRedrive, at its CreatedAt, which never changes), so History rebuilds
// it from the record (storekit.DeliveryCreation, EntryCreation). A store of open records
// that were never touched thus pays nothing for their history.

// event is one stored history entry after the creation one: 64 bytes, its
// strings shared with the call that made it.
type event struct {
	// at is the change's time, the record's UpdatedAt after it, in Unix
	// microseconds (every time crossing the API is UTC microseconds).
	at int64
	// actor is who made the call: an owner, or a claim worker as the Agent
	// of an Owner whose Incarnation is empty (owners always have one).
	// The zero Owner means nobody in particular.
	actor ledger.Owner
	// reason is Transition.Reason.
	reason string
	// op, from and to are Transition.Op, From and To, coded by opCode and
	// stateCode (or statusCode) as small integers.
	op, from, to uint8
}

// appendEvent appends e to a record's stored history h. A history grows
// from one entry to three, then doubles: a record that was only leased or
// claimed (the work in flight) keeps one 64-byte entry, and one leased,
// acknowledged and processed needs two allocations in all.
func appendEvent(h []event, e event) []event {
	switch {
	case h == nil:
		h = make([]event, 0, 1)
	case len(h) == 1 && cap(h) == 1:
		h = append(make([]event, 0, 3), h...)
	}
	return append(h, e)
}

// transition expands e into the entry with sequence number seq; states
// names the codes of from and to.
func (e *event) transition(seq int64, states []string) ledger.Transition {
	t := ledger.Transition{
		Seq:     seq,
		Op:      operations[e.op],
		From:    states[e.from],
		To:      states[e.to],
		Outcome: ledger.OutcomeApplied,
		Reason:  e.reason,
		At:      time.UnixMicro(e.at).UTC(),
	}
	t.Actor = e.actor.Agent // a claim worker, or nobody
	if e.actor.Incarnation != "" {
		t.Actor = e.actor.String()
	}
	return t
}

// newEvent keeps t, made by actor, in compact form; code turns its states
// into small integers.
func newEvent(t ledger.Transition, actor ledger.Owner, code func(string) uint8) event {
	return event{
		at:     t.At.UnixMicro(),
		actor:  actor,
		reason: t.Reason,
		op:     opCode(t.Op),
		from:   code(t.From),
		to:     code(t.To),
	}
}

// expand returns the whole history of a record: its creation entry
// (storekit.DeliveryCreation or EntryCreation, which the record implies),
// then one entry per event.
func expand(creation ledger.Transition, events []event, states []string) []ledger.Transition {
	out := make([]ledger.Transition, 0, len(events)+1)
	out = append(out, creation)
	for i := range events {
		out = append(out, events[i].transition(int64(i+2), states))
	}
	return out
}

// record appends the history entry of the change of the delivery in slot
// from before to after, made by op for actor. The caller holds s.mu and
// has checked that history is on.
func (s *Store) record(slot uint32, op ledger.Operation, before, after *ledger.Delivery, actor ledger.Owner) {
	t := storekit.DeliveryTransition(op, before, after, "")
	s.hist[slot] = appendEvent(s.hist[slot], newEvent(t, actor, stateCode))
}

// actorOf returns who made a call through Store.apply that applied to
// before: the holder of the lease in force for the lease-bearing calls, the
// owner that acknowledged for MarkProcessed (the only one it accepts), and
// nobody for the others.
func actorOf(op ledger.Operation, before *ledger.Delivery) ledger.Owner {
	switch op {
	case ledger.OpAcknowledge, ledger.OpMarkFailed, ledger.OpRelease, ledger.OpRenewLease:
		if before.Lease != nil {
			return before.Lease.Owner
		}
	case ledger.OpMarkProcessed:
		if before.Ack != nil {
			return before.Ack.Owner
		}
	}
	return ledger.Owner{}
}

// History returns the transitions of delivery id, oldest first, in a new
// slice the caller may keep: the creation first (Seq 1), then one entry per
// applied transition, Seq counting up by one, the last equal to the
// record's Version. With WithoutHistory it answers an empty, non-nil slice.
// Errors: ErrNotFound for an unknown (or purged) ID, ErrInvalid, ctx.Err().
func (s *Store) History(ctx context.Context, id ledger.DeliveryID) ([]ledger.Transition, error) {
	if err := begin(ctx, storekit.ValidateGet(string(id))); err != nil {
		return nil, err
	}
	s.mu.Lock()
	slot, ok := s.records[id]
	var (
		creation ledger.Transition
		events   []event
	)
	if ok && !s.cfg.noHistory {
		creation = storekit.DeliveryCreation(s.recs[slot])
		// Copied under the lock: the list grows in place with the next
		// transition, and nothing handed out may share memory with it.
		events = append([]event(nil), s.hist[slot]...)
	}
	s.mu.Unlock()
	switch {
	case !ok:
		return nil, fmt.Errorf("memstore: history of delivery %q: %w", id, ledger.ErrNotFound)
	case s.cfg.noHistory:
		return []ledger.Transition{}, nil
	}
	return expand(creation, events, deliveryStates[:]), nil
}

// recordEntry appends to p's history the entry of its change to after,
// described by c. The caller holds o.mu.
func (o *Outbox) recordEntry(p *entry, c change, after *ledger.OutboxEntry) {
	if o.cfg.noHistory {
		return
	}
	t := storekit.EntryTransition(c.op, &p.OutboxEntry, after, "")
	if c.reason != "" {
		t.Reason = c.reason
	}
	p.hist = appendEvent(p.hist, newEvent(t, ledger.Owner{Agent: c.worker}, statusCode))
}

// change says who changed an outbox entry, and how, for its history.
type change struct {
	op ledger.Operation
	// worker is the claim worker that made the call; empty for the base
	// contract's calls, which act for nobody in particular.
	worker string
	// reason, when not empty, is the history entry's reason (ReleaseClaim's
	// reason, which the entry itself does not keep).
	reason string
}

// EntryHistory returns the transitions of outbox entry id, oldest first, as
// Store.History does for deliveries. Errors: ErrNotFound for an unknown (or
// purged) ID, ErrInvalid, ctx.Err().
func (o *Outbox) EntryHistory(ctx context.Context, id ledger.OutboxEntryID) ([]ledger.Transition, error) {
	if err := begin(ctx, storekit.ValidateGet(string(id))); err != nil {
		return nil, err
	}
	o.mu.Lock()
	p, ok := o.entries[id]
	var (
		creation ledger.Transition
		events   []event
	)
	if ok && !o.cfg.noHistory {
		creation = storekit.EntryCreation(&p.OutboxEntry)
		events = append([]event(nil), p.hist...)
	}
	o.mu.Unlock()
	switch {
	case !ok:
		return nil, fmt.Errorf("memstore: history of outbox entry %s: %w", id, ledger.ErrNotFound)
	case o.cfg.noHistory:
		return []ledger.Transition{}, nil
	}
	return expand(creation, events, outboxStatuses[:]), nil
}

// operations lists every operation by its code; code 0 is none. It is a
// lookup table, never written.
var operations = [...]ledger.Operation{
	"",
	ledger.OpEnqueue, ledger.OpLease, ledger.OpAcknowledge, ledger.OpMarkProcessed,
	ledger.OpRecordActivation, ledger.OpMarkFailed, ledger.OpRelease, ledger.OpExpire,
	ledger.OpAbandon, ledger.OpExpireCeremony, ledger.OpSupersede, ledger.OpReclaim,
	ledger.OpRenewLease, ledger.OpSave, ledger.OpMarkDelivered, ledger.OpMarkDeadLettered,
	ledger.OpClaim, ledger.OpReleaseClaim, ledger.OpSaveClaim, ledger.OpRenewClaim,
	ledger.OpRedrive,
}

// opCode returns the code of op in operations (0 for none). It is a switch
// rather than a search of the table because it runs on every transition;
// a test checks that the two agree.
func opCode(op ledger.Operation) uint8 {
	switch op {
	case ledger.OpEnqueue:
		return 1
	case ledger.OpLease:
		return 2
	case ledger.OpAcknowledge:
		return 3
	case ledger.OpMarkProcessed:
		return 4
	case ledger.OpRecordActivation:
		return 5
	case ledger.OpMarkFailed:
		return 6
	case ledger.OpRelease:
		return 7
	case ledger.OpExpire:
		return 8
	case ledger.OpAbandon:
		return 9
	case ledger.OpExpireCeremony:
		return 10
	case ledger.OpSupersede:
		return 11
	case ledger.OpReclaim:
		return 12
	case ledger.OpRenewLease:
		return 13
	case ledger.OpSave:
		return 14
	case ledger.OpMarkDelivered:
		return 15
	case ledger.OpMarkDeadLettered:
		return 16
	case ledger.OpClaim:
		return 17
	case ledger.OpReleaseClaim:
		return 18
	case ledger.OpSaveClaim:
		return 19
	case ledger.OpRenewClaim:
		return 20
	case ledger.OpRedrive:
		return 21
	}
	return 0
}

// deliveryStates and outboxStatuses list the states by their codes; code 0
// is none (the From of a creation). Like operations they are lookup tables,
// never written.
var (
	deliveryStates = [...]string{
		"",
		string(ledger.DeliveryStateOffered), string(ledger.DeliveryStateLeased),
		string(ledger.DeliveryStateAcknowledged), string(ledger.DeliveryStateProcessed),
		string(ledger.DeliveryStateFailed), string(ledger.DeliveryStateExpired),
	}
	outboxStatuses = [...]string{
		"",
		string(ledger.OutboxStatusPending), string(ledger.OutboxStatusRetryScheduled),
		string(ledger.OutboxStatusDeferred), string(ledger.OutboxStatusDelivered),
		string(ledger.OutboxStatusFailed), string(ledger.OutboxStatusDeadLettered),
	}
)

// stateCode returns the code of a delivery state in deliveryStates (0 for
// none). Like opCode it is a switch because it runs on every transition.
func stateCode(s string) uint8 {
	switch ledger.DeliveryState(s) {
	case ledger.DeliveryStateOffered:
		return 1
	case ledger.DeliveryStateLeased:
		return 2
	case ledger.DeliveryStateAcknowledged:
		return 3
	case ledger.DeliveryStateProcessed:
		return 4
	case ledger.DeliveryStateFailed:
		return 5
	case ledger.DeliveryStateExpired:
		return 6
	}
	return 0
}

// statusCode returns the code of an outbox status in outboxStatuses.
func statusCode(s string) uint8 {
	switch ledger.OutboxStatus(s) {
	case ledger.OutboxStatusPending:
		return 1
	case ledger.OutboxStatusRetryScheduled:
		return 2
	case ledger.OutboxStatusDeferred:
		return 3
	case ledger.OutboxStatusDelivered:
		return 4
	case ledger.OutboxStatusFailed:
		return 5
	case ledger.OutboxStatusDeadLettered:
		return 6
	}
	return 0
}
