package pgstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// This file maps records to table rows and back. A row struct lists its
// fields in column order (columns returns the name and a pointer for each),
// so one list drives the SELECT, INSERT and UPDATE column lists in
// query.go, the Scan destinations and the statement arguments: the order
// cannot drift between them.
//
// Mapping rules: a zero time is NULL; a nil nested struct is NULL in all
// of its columns, and it is present exactly when its key column (lease
// token, ack agent, failure kind, ...) is not NULL; an empty payload and
// an empty ceremony are NULL; durations are microseconds; metadata is a
// jsonb object, NULL when empty.
//
// Metadata is written once, by the enqueue that creates the row, and
// never by an UPDATE: no transition changes it. So columns lists the
// columns a transition writes, and readColumns those and metadata, which
// every read returns; newDeliveryRow and newOutboxRow leave metadata out
// (the enqueue adds it, see metadataParam), so that the statements writing
// transitions (the ordinary write-back, the group and the held writes)
// neither encode, compare nor send it.

// column names one table column and points at the row field it maps to.
type column struct {
	name string
	ptr  any
}

// columnNames returns the names of cols, in order.
func columnNames(cols []column) []string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return names
}

// pointers returns the field pointers of cols, in order: Scan
// destinations, and statement arguments (pgx writes a nil pointer as NULL).
func pointers(cols []column) []any {
	ptrs := make([]any, len(cols))
	for i, c := range cols {
		ptrs[i] = c.ptr
	}
	return ptrs
}

// Redrive's columns (migrations/0010) stand just before version in both
// row structs. A record an enqueue copies in is never a redrive, so the
// copy leaves them out and lets them take their NULL default: enqueueCopy
// and enqueueCopyNames give the copy the row's columns but those two,
// without a copy of the row, so that an enqueue sends what it sent before
// redrive existed.

// enqueueCopyNames returns names, a row struct's column names, without
// redriven_from and redriven_to.
func enqueueCopyNames(names []string) []string {
	n := len(names)
	return append(names[:n-3:n-3], names[n-1])
}

// enqueueCopyColumns returns cols, a row's columns, in the order of
// enqueueCopyNames, reusing their backing array.
func enqueueCopyColumns(cols []column) []column {
	n := len(cols)
	cols[n-3] = cols[n-1]
	return cols[:n-2]
}

// deliveryRow is one row of the deliveries table.
type deliveryRow struct {
	ID, Target                                 string
	EnqueuedTarget                             *string
	Ceremony                                   *string
	Payload                                    []byte
	MaxAttempts                                int64
	BackoffBaseUS, BackoffMaxUS, AckWindowUS   int64
	State                                      string
	Attempts                                   int64
	AvailableAt                                time.Time
	LeaseSeq                                   int64
	LeaseAgent, LeaseIncarnation, LeaseToken   *string
	LeaseGrantedAt, LeaseExpiresAt             *time.Time
	EndedLeaseToken                            *string
	EndedLeaseSeq                              *int64
	EndedLeaseOp                               *string
	EndedLeaseAt                               *time.Time
	AckAgent, AckIncarnation, AckObservation   *string
	AckAt, AckDeadline                         *time.Time
	ProcessingAction                           *string
	ProcessingFence                            *int64
	ProcessingAt                               *time.Time
	Activations                                int64
	LastActivationResult, LastActivationDetail *string
	LastActivationAt                           *time.Time
	LastFailureKind, LastFailureMessage        *string
	LastFailurePermanent                       *bool
	LastFailureAgent, LastFailureIncarnation   *string
	LastFailureAt                              *time.Time
	CauseKind, CauseDetail                     *string
	CreatedAt, UpdatedAt                       time.Time
	EndedAt                                    *time.Time
	RedrivenFrom, RedrivenTo                   *string
	Version                                    int64
	Metadata                                   ledger.Metadata
}

// metadataColumn is the column of a record's metadata, in both tables.
const metadataColumn = "metadata"

// readOnlyColumns is how many columns readColumns adds after columns:
// the ones written at enqueue only (metadataColumn).
const readOnlyColumns = 1

// readColumns lists the columns every read returns: r's columns, then
// metadata (see the mapping rules above).
func (r *deliveryRow) readColumns() []column {
	return append(r.columns(), column{metadataColumn, &r.Metadata})
}

// columns lists r's columns: id comes first and version last, which the
// UPDATE statement in query.go relies on. The order is the statements'
// own; the table's differs for columns later migrations added at its end
// (enqueued_target, redriven_from, redriven_to), and no statement depends
// on it.
func (r *deliveryRow) columns() []column {
	return []column{
		{"id", &r.ID}, {"target", &r.Target}, {"enqueued_target", &r.EnqueuedTarget}, {"ceremony", &r.Ceremony}, {"payload", &r.Payload},
		{"max_attempts", &r.MaxAttempts}, {"backoff_base_us", &r.BackoffBaseUS},
		{"backoff_max_us", &r.BackoffMaxUS}, {"ack_window_us", &r.AckWindowUS},
		{"state", &r.State}, {"attempts", &r.Attempts}, {"available_at", &r.AvailableAt},
		{"lease_seq", &r.LeaseSeq}, {"lease_agent", &r.LeaseAgent},
		{"lease_incarnation", &r.LeaseIncarnation}, {"lease_token", &r.LeaseToken},
		{"lease_granted_at", &r.LeaseGrantedAt}, {"lease_expires_at", &r.LeaseExpiresAt},
		{"ended_lease_token", &r.EndedLeaseToken}, {"ended_lease_seq", &r.EndedLeaseSeq},
		{"ended_lease_op", &r.EndedLeaseOp}, {"ended_lease_at", &r.EndedLeaseAt},
		{"ack_agent", &r.AckAgent}, {"ack_incarnation", &r.AckIncarnation},
		{"ack_observation", &r.AckObservation}, {"ack_at", &r.AckAt}, {"ack_deadline", &r.AckDeadline},
		{"processing_action", &r.ProcessingAction}, {"processing_fence", &r.ProcessingFence},
		{"processing_at", &r.ProcessingAt},
		{"activations", &r.Activations}, {"last_activation_result", &r.LastActivationResult},
		{"last_activation_detail", &r.LastActivationDetail}, {"last_activation_at", &r.LastActivationAt},
		{"last_failure_kind", &r.LastFailureKind}, {"last_failure_message", &r.LastFailureMessage},
		{"last_failure_permanent", &r.LastFailurePermanent}, {"last_failure_agent", &r.LastFailureAgent},
		{"last_failure_incarnation", &r.LastFailureIncarnation}, {"last_failure_at", &r.LastFailureAt},
		{"cause_kind", &r.CauseKind}, {"cause_detail", &r.CauseDetail},
		{"created_at", &r.CreatedAt}, {"updated_at", &r.UpdatedAt}, {"ended_at", &r.EndedAt},
		{"redriven_from", &r.RedrivenFrom}, {"redriven_to", &r.RedrivenTo},
		{"version", &r.Version},
	}
}

// newDeliveryRow maps d to its row. It fails only when d breaks an
// invariant the table layout relies on (a lease of another delivery or
// another sequence number), which would be a bug in the state machine.
func newDeliveryRow(d ledger.Delivery) (deliveryRow, error) {
	var r deliveryRow
	err := r.fill(d, nil)
	return r, err
}

// fill sets r to d's row, the values of its nullable columns kept in c
// (nil: each on the heap; see cells).
func (r *deliveryRow) fill(d ledger.Delivery, c *cells) error {
	*r = deliveryRow{
		ID:             string(d.ID),
		Target:         string(d.Target),
		EnqueuedTarget: optStringCell(c, string(d.EnqueuedTarget)),
		Ceremony:       optStringCell(c, string(d.Ceremony)),
		Payload:        optBytes(d.Payload),
		MaxAttempts:    int64(d.Policy.MaxAttempts),
		BackoffBaseUS:  d.Policy.BackoffBase.Microseconds(),
		BackoffMaxUS:   d.Policy.BackoffMax.Microseconds(),
		AckWindowUS:    d.Policy.AckWindow.Microseconds(),
		State:          string(d.State),
		Attempts:       int64(d.Attempts),
		AvailableAt:    d.AvailableAt,
		LeaseSeq:       d.LeaseSeq,
		Activations:    int64(d.Activations),
		CreatedAt:      d.CreatedAt,
		UpdatedAt:      d.UpdatedAt,
		EndedAt:        optTimeCell(c, d.EndedAt),
		RedrivenFrom:   optStringCell(c, string(d.RedrivenFrom)),
		RedrivenTo:     optStringCell(c, string(d.RedrivenTo)),
		Version:        d.Version,
	}
	if l := d.Lease; l != nil {
		// The table keeps one sequence column: a lease in force is always
		// the latest grant of this very delivery.
		if l.DeliveryID != d.ID || l.Seq != d.LeaseSeq {
			return fmt.Errorf("pgstore: delivery %s: lease (%s, seq %d) is not its latest grant (seq %d)", d.ID, l.DeliveryID, l.Seq, d.LeaseSeq)
		}
		r.LeaseAgent, r.LeaseIncarnation = cell(c, l.Owner.Agent), cell(c, l.Owner.Incarnation)
		r.LeaseToken = cell(c, string(l.Token))
		r.LeaseGrantedAt, r.LeaseExpiresAt = cell(c, l.GrantedAt), cell(c, l.ExpiresAt)
	}
	if e := d.EndedLease; e != nil {
		r.EndedLeaseToken, r.EndedLeaseSeq = cell(c, string(e.Token)), cell(c, e.Seq)
		r.EndedLeaseOp, r.EndedLeaseAt = cell(c, string(e.Op)), optTimeCell(c, e.At)
	}
	if a := d.Ack; a != nil {
		r.AckAgent, r.AckIncarnation = cell(c, a.Owner.Agent), cell(c, a.Owner.Incarnation)
		r.AckObservation, r.AckAt, r.AckDeadline = cell(c, a.Observation), optTimeCell(c, a.At), optTimeCell(c, a.Deadline)
	}
	if p := d.Processing; p != nil {
		r.ProcessingAction, r.ProcessingAt = cell(c, string(p.Action)), optTimeCell(c, p.At)
		if p.Fence != nil {
			r.ProcessingFence = cell(c, int64(*p.Fence))
		}
	}
	if a := d.LastActivation; a != nil {
		r.LastActivationResult, r.LastActivationDetail = cell(c, string(a.Result)), cell(c, a.Detail)
	}
	r.LastActivationAt = optTimeCell(c, d.LastActivationAt)
	if f := d.LastFailure; f != nil {
		r.LastFailureKind, r.LastFailureMessage = cell(c, string(f.Kind)), cell(c, f.Message)
		r.LastFailurePermanent = cell(c, f.Permanent)
		r.LastFailureAgent, r.LastFailureIncarnation = cell(c, f.Owner.Agent), cell(c, f.Owner.Incarnation)
		r.LastFailureAt = optTimeCell(c, f.At)
	}
	if cause := d.Cause; cause != nil {
		r.CauseKind, r.CauseDetail = cell(c, string(cause.Kind)), cell(c, cause.Detail)
	}
	return nil
}

// delivery maps r back to the record.
func (r *deliveryRow) delivery() ledger.Delivery {
	d := ledger.Delivery{
		ID:             ledger.DeliveryID(r.ID),
		Target:         ledger.Target(r.Target),
		EnqueuedTarget: ledger.Target(deref(r.EnqueuedTarget)),
		Ceremony:       ledger.CeremonyID(deref(r.Ceremony)),
		Payload:        optBytes(r.Payload),
		Policy: ledger.Policy{
			MaxAttempts: int(r.MaxAttempts),
			BackoffBase: time.Duration(r.BackoffBaseUS) * time.Microsecond,
			BackoffMax:  time.Duration(r.BackoffMaxUS) * time.Microsecond,
			AckWindow:   time.Duration(r.AckWindowUS) * time.Microsecond,
		},
		State:            ledger.DeliveryState(r.State),
		Attempts:         int(r.Attempts),
		AvailableAt:      ledger.Normalize(r.AvailableAt),
		LeaseSeq:         r.LeaseSeq,
		Activations:      int(r.Activations),
		LastActivationAt: fromOptTime(r.LastActivationAt),
		CreatedAt:        ledger.Normalize(r.CreatedAt),
		UpdatedAt:        ledger.Normalize(r.UpdatedAt),
		EndedAt:          fromOptTime(r.EndedAt),
		RedrivenFrom:     ledger.DeliveryID(deref(r.RedrivenFrom)),
		RedrivenTo:       ledger.DeliveryID(deref(r.RedrivenTo)),
		Version:          r.Version,
		Metadata:         optMetadata(r.Metadata),
	}
	if r.LeaseToken != nil {
		d.Lease = &ledger.Lease{
			DeliveryID: d.ID,
			Owner:      ledger.Owner{Agent: deref(r.LeaseAgent), Incarnation: deref(r.LeaseIncarnation)},
			Token:      ledger.Token(*r.LeaseToken),
			Seq:        r.LeaseSeq,
			GrantedAt:  fromOptTime(r.LeaseGrantedAt),
			ExpiresAt:  fromOptTime(r.LeaseExpiresAt),
		}
	}
	if r.EndedLeaseOp != nil {
		d.EndedLease = &ledger.EndedGrant{
			Token: ledger.Token(deref(r.EndedLeaseToken)),
			Seq:   deref(r.EndedLeaseSeq),
			Op:    ledger.Operation(*r.EndedLeaseOp),
			At:    fromOptTime(r.EndedLeaseAt),
		}
	}
	if r.AckAgent != nil {
		d.Ack = &ledger.Acknowledgement{
			Owner:       ledger.Owner{Agent: *r.AckAgent, Incarnation: deref(r.AckIncarnation)},
			Observation: deref(r.AckObservation),
			At:          fromOptTime(r.AckAt),
			Deadline:    fromOptTime(r.AckDeadline),
		}
	}
	if r.ProcessingAction != nil {
		d.Processing = &ledger.Processing{Action: ledger.ActionRef(*r.ProcessingAction), At: fromOptTime(r.ProcessingAt)}
		if r.ProcessingFence != nil {
			d.Processing.Fence = ledger.FenceOf(*r.ProcessingFence)
		}
	}
	if r.LastActivationResult != nil {
		d.LastActivation = &ledger.Activation{Result: ledger.ActivationResult(*r.LastActivationResult), Detail: deref(r.LastActivationDetail)}
	}
	if r.LastFailureKind != nil {
		d.LastFailure = &ledger.Failure{
			Kind:      ledger.FailureKind(*r.LastFailureKind),
			Message:   deref(r.LastFailureMessage),
			Permanent: deref(r.LastFailurePermanent),
			Owner:     ledger.Owner{Agent: deref(r.LastFailureAgent), Incarnation: deref(r.LastFailureIncarnation)},
			At:        fromOptTime(r.LastFailureAt),
		}
	}
	if r.CauseKind != nil {
		d.Cause = &ledger.Cause{Kind: ledger.CauseKind(*r.CauseKind), Detail: deref(r.CauseDetail)}
	}
	return d
}

// outboxRow is one row of the outbox_entries table.
type outboxRow struct {
	ID, Provider, Kind              string
	Payload                         []byte
	IdempotencyKey                  string
	Status                          string
	Attempts                        int64
	NextAttemptAt                   *time.Time
	LastErrorCode, LastErrorMessage *string
	ResultProviderRef, ResultDetail *string
	DeadLetterReason                string
	ClaimSeq                        int64
	ClaimWorker, ClaimToken         *string
	ClaimClaimedAt, ClaimExpiresAt  *time.Time
	EndedClaimToken                 *string
	EndedClaimSeq                   *int64
	EndedClaimOp                    *string
	EndedClaimAt                    *time.Time
	CreatedAt, UpdatedAt            time.Time
	EndedAt                         *time.Time
	RedrivenFrom, RedrivenTo        *string
	Version                         int64
	Metadata                        ledger.Metadata
}

// readColumns lists the columns every read returns: r's columns, then
// metadata, as for deliveries.
func (r *outboxRow) readColumns() []column {
	return append(r.columns(), column{metadataColumn, &r.Metadata})
}

// columns lists r's columns in table order; id first, version last.
func (r *outboxRow) columns() []column {
	return []column{
		{"id", &r.ID}, {"provider", &r.Provider}, {"kind", &r.Kind}, {"payload", &r.Payload},
		{"idempotency_key", &r.IdempotencyKey}, {"status", &r.Status}, {"attempts", &r.Attempts},
		{"next_attempt_at", &r.NextAttemptAt}, {"last_error_code", &r.LastErrorCode},
		{"last_error_message", &r.LastErrorMessage}, {"result_provider_ref", &r.ResultProviderRef},
		{"result_detail", &r.ResultDetail}, {"dead_letter_reason", &r.DeadLetterReason},
		{"claim_seq", &r.ClaimSeq}, {"claim_worker", &r.ClaimWorker}, {"claim_token", &r.ClaimToken},
		{"claim_claimed_at", &r.ClaimClaimedAt}, {"claim_expires_at", &r.ClaimExpiresAt},
		{"ended_claim_token", &r.EndedClaimToken}, {"ended_claim_seq", &r.EndedClaimSeq},
		{"ended_claim_op", &r.EndedClaimOp}, {"ended_claim_at", &r.EndedClaimAt},
		{"created_at", &r.CreatedAt}, {"updated_at", &r.UpdatedAt}, {"ended_at", &r.EndedAt},
		{"redriven_from", &r.RedrivenFrom}, {"redriven_to", &r.RedrivenTo},
		{"version", &r.Version},
	}
}

// newOutboxRow maps e to its row; like newDeliveryRow it fails only on a
// claim that is not the entry's latest.
func newOutboxRow(e ledger.OutboxEntry) (outboxRow, error) {
	var r outboxRow
	err := r.fill(e, nil)
	return r, err
}

// fill sets r to e's row, the values of its nullable columns kept in c
// (nil: each on the heap; see cells).
func (r *outboxRow) fill(e ledger.OutboxEntry, c *cells) error {
	*r = outboxRow{
		ID:               string(e.ID),
		Provider:         e.Envelope.Provider,
		Kind:             e.Envelope.Kind,
		Payload:          optBytes(e.Envelope.Payload),
		IdempotencyKey:   e.Envelope.IdempotencyKey,
		Status:           string(e.Status),
		Attempts:         int64(e.Attempts),
		NextAttemptAt:    optTimeCell(c, e.NextAttemptAt),
		DeadLetterReason: e.DeadLetterReason,
		ClaimSeq:         e.ClaimSeq,
		CreatedAt:        e.CreatedAt,
		UpdatedAt:        e.UpdatedAt,
		EndedAt:          optTimeCell(c, e.EndedAt),
		RedrivenFrom:     optStringCell(c, string(e.RedrivenFrom)),
		RedrivenTo:       optStringCell(c, string(e.RedrivenTo)),
		Version:          e.Version,
	}
	if le := e.LastError; le != nil {
		r.LastErrorCode, r.LastErrorMessage = cell(c, le.Code), cell(c, le.Message)
	}
	if res := e.Result; res != nil {
		r.ResultProviderRef, r.ResultDetail = cell(c, res.ProviderRef), cell(c, res.Detail)
	}
	if cl := e.Claim; cl != nil {
		if cl.EntryID != e.ID || cl.Seq != e.ClaimSeq {
			return fmt.Errorf("pgstore: outbox entry %s: claim (%s, seq %d) is not its latest (seq %d)", e.ID, cl.EntryID, cl.Seq, e.ClaimSeq)
		}
		r.ClaimWorker, r.ClaimToken = cell(c, cl.Worker), cell(c, string(cl.Token))
		r.ClaimClaimedAt, r.ClaimExpiresAt = cell(c, cl.ClaimedAt), cell(c, cl.ExpiresAt)
	}
	if ec := e.EndedClaim; ec != nil {
		r.EndedClaimToken, r.EndedClaimSeq = cell(c, string(ec.Token)), cell(c, ec.Seq)
		r.EndedClaimOp, r.EndedClaimAt = cell(c, string(ec.Op)), optTimeCell(c, ec.At)
	}
	return nil
}

// entry maps r back to the record.
func (r *outboxRow) entry() ledger.OutboxEntry {
	e := ledger.OutboxEntry{
		ID: ledger.OutboxEntryID(r.ID),
		Envelope: ledger.Envelope{
			Provider:       r.Provider,
			Kind:           r.Kind,
			Payload:        optBytes(r.Payload),
			IdempotencyKey: r.IdempotencyKey,
			Metadata:       optMetadata(r.Metadata),
		},
		Status:           ledger.OutboxStatus(r.Status),
		Attempts:         int(r.Attempts),
		NextAttemptAt:    fromOptTime(r.NextAttemptAt),
		DeadLetterReason: r.DeadLetterReason,
		ClaimSeq:         r.ClaimSeq,
		CreatedAt:        ledger.Normalize(r.CreatedAt),
		UpdatedAt:        ledger.Normalize(r.UpdatedAt),
		EndedAt:          fromOptTime(r.EndedAt),
		RedrivenFrom:     ledger.OutboxEntryID(deref(r.RedrivenFrom)),
		RedrivenTo:       ledger.OutboxEntryID(deref(r.RedrivenTo)),
		Version:          r.Version,
	}
	if r.LastErrorMessage != nil {
		e.LastError = &ledger.EmissionError{Code: deref(r.LastErrorCode), Message: *r.LastErrorMessage}
	}
	if r.ResultDetail != nil {
		e.Result = &ledger.EmissionResult{ProviderRef: deref(r.ResultProviderRef), Detail: *r.ResultDetail}
	}
	if r.ClaimToken != nil {
		e.Claim = &ledger.Claim{
			EntryID:   e.ID,
			Worker:    deref(r.ClaimWorker),
			Token:     ledger.Token(*r.ClaimToken),
			Seq:       r.ClaimSeq,
			ClaimedAt: fromOptTime(r.ClaimClaimedAt),
			ExpiresAt: fromOptTime(r.ClaimExpiresAt),
		}
	}
	if r.EndedClaimOp != nil {
		e.EndedClaim = &ledger.EndedGrant{
			Token: ledger.Token(deref(r.EndedClaimToken)),
			Seq:   deref(r.EndedClaimSeq),
			Op:    ledger.Operation(*r.EndedClaimOp),
			At:    fromOptTime(r.EndedClaimAt),
		}
	}
	return e
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// optString maps "" to NULL.
// cells holds the values that the nullable columns of one row point to,
// so that a row filled again and again (recordKind.reuse) allocates none
// of them: a drained item fills two rows per transition, each with up to
// a dozen such values. The values are good until the next reset, so a
// row filled with cells must be read before it is filled again. A nil
// *cells puts each value on the heap, for rows that are kept.
type cells struct {
	strs  [24]string
	times [12]time.Time
	ints  [4]int64
	bools [2]bool
	// ns, nt, ni, nb count the cells of each kind in use.
	ns, nt, ni, nb int
}

// reset makes every cell free again.
func (c *cells) reset() { c.ns, c.nt, c.ni, c.nb = 0, 0, 0, 0 }

// cell returns a pointer to v: to a cell of c when one is free, else to
// a copy on the heap.
func cell[T string | time.Time | int64 | bool](c *cells, v T) *T {
	if c != nil {
		switch v := any(v).(type) {
		case string:
			if c.ns < len(c.strs) {
				c.strs[c.ns] = v
				c.ns++
				return any(&c.strs[c.ns-1]).(*T)
			}
		case time.Time:
			if c.nt < len(c.times) {
				c.times[c.nt] = v
				c.nt++
				return any(&c.times[c.nt-1]).(*T)
			}
		case int64:
			if c.ni < len(c.ints) {
				c.ints[c.ni] = v
				c.ni++
				return any(&c.ints[c.ni-1]).(*T)
			}
		case bool:
			if c.nb < len(c.bools) {
				c.bools[c.nb] = v
				c.nb++
				return any(&c.bools[c.nb-1]).(*T)
			}
		}
	}
	return &v
}

// optStringCell maps "" to NULL, and any other string to a cell of c.
func optStringCell(c *cells, s string) *string {
	if s == "" {
		return nil
	}
	return cell(c, s)
}

// optTimeCell maps the zero time to NULL, and any other to a cell of c.
func optTimeCell(c *cells, t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return cell(c, t)
}

// optString maps "" to NULL, and any other string to a copy on the heap.
func optString(s string) *string { return optStringCell(nil, s) }

// optBytes maps an empty payload to nil (NULL), so nil and empty read back
// the same, as nil.
func optBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// metadataParam is the value an insert writes to the metadata column:
// NULL (nil) for no metadata, so that an item without it costs nothing
// more than before the column existed, else the object as JSON text,
// which the server reads as the column's jsonb. A map would need the
// parameter's type, which a connection that describes no statement
// (behind PgBouncer in transaction mode) never learns.
func metadataParam(md ledger.Metadata) (any, error) {
	if len(md) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(map[string]string(md))
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// optMetadata maps an empty object read back to nil, as NULL is.
func optMetadata(md ledger.Metadata) ledger.Metadata {
	if len(md) == 0 {
		return nil
	}
	return md
}

// fromOptTime maps NULL to the zero time and anything else to UTC
// microseconds (pgx returns local times).
func fromOptTime(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return ledger.Normalize(*p)
}
