package storekit

import (
	"cmp"
	"time"

	"github.com/leaseledger/ledger"
)

// ValidateEnded checks a ledger.EndedQuery: both times valid, Since before
// Until, and Limit 1 to ledger.MaxEndedLimit.
func ValidateEnded(q ledger.EndedQuery) error {
	if err := first(ValidateTime("since", q.Since), ValidateTime("until", q.Until)); err != nil {
		return err
	}
	if !q.Since.Before(q.Until) {
		return invalid("since", "must be before until")
	}
	if q.Limit < 1 || q.Limit > ledger.MaxEndedLimit {
		return invalid("limit", "must be between 1 and %d, got %d", ledger.MaxEndedLimit, q.Limit)
	}
	return nil
}

// ValidateOutboxList checks a ledger.OutboxListQuery and returns the entry ID its
// cursor points after ("" for the first page).
func ValidateOutboxList(q ledger.OutboxListQuery) (after ledger.OutboxEntryID, err error) {
	for _, s := range q.Statuses {
		if !s.Valid() {
			return "", invalid("statuses", "unknown status %q", s)
		}
	}
	if len(q.Providers) > ledger.MaxLimit {
		return "", invalid("providers", "must list at most %d providers", ledger.MaxLimit)
	}
	for _, p := range q.Providers {
		if err := ValidateName("providers", p); err != nil {
			return "", err
		}
	}
	if err := first(validateOptionalName("idempotency key", q.IdempotencyKey), ValidateLimit("limit", q.Limit)); err != nil {
		return "", err
	}
	id, err := decodeCursor(outboxCursorPrefix, q.Cursor)
	return ledger.OutboxEntryID(id), err
}

const outboxCursorPrefix = "e1:"

// EncodeOutboxCursor returns the opaque ListEntries cursor that resumes
// after id.
func EncodeOutboxCursor(after ledger.OutboxEntryID) string {
	return encodeCursor(outboxCursorPrefix, string(after))
}

// DecodeOutboxCursor returns the entry ID a ListEntries cursor resumes
// after; "" for an empty cursor. A cursor not made by EncodeOutboxCursor
// (a List cursor among them) is ledger.ErrInvalid.
func DecodeOutboxCursor(cursor string) (ledger.OutboxEntryID, error) {
	id, err := decodeCursor(outboxCursorPrefix, cursor)
	return ledger.OutboxEntryID(id), err
}

// CompareEnded orders ended records as ListEnded and ListEndedEntries
// return them: a negative number when the record that ended at (atA, idA)
// comes first, latest EndedAt first, then greatest ID.
func CompareEnded(atA time.Time, idA string, atB time.Time, idB string) int {
	return cmp.Or(atB.Compare(atA), cmp.Compare(idB, idA))
}
