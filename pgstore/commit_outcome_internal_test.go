package pgstore

import (
	"errors"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
)

// TestCommitOutcome pins what a failed round trip carrying COMMIT tells a
// caller. An answered COMMIT is a commit, whatever fails after it: a call
// run again on its own would find its own transition done and answer
// that the record had ended, a definite "not applied" for what applied.
func TestCommitOutcome(t *testing.T) {
	fatal := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	refused := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40001", Message: "could not serialize access"}
	lost := io.ErrUnexpectedEOF
	for _, c := range []struct {
		name                 string
		err                  error
		answered             bool
		wantUnknown, wantErr bool
	}{
		{name: "committed", err: nil, answered: true},
		{name: "answered COMMIT, then the session ended", err: fatal, answered: true},
		{name: "answered COMMIT, then the connection was lost", err: lost, answered: true},
		{name: "COMMIT answered ROLLBACK", err: errRolledBack, wantErr: true},
		{name: "an ERROR response", err: refused, wantErr: true},
		{name: "a FATAL response, before the commit record", err: fatal, wantErr: true},
		{name: "the connection lost while COMMIT was answered", err: lost, wantUnknown: true, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			unknown, err := commitOutcome(c.err, c.answered)
			assert.Equal(t, c.wantUnknown, unknown, "outcome unknown")
			if c.wantErr {
				assert.True(t, errors.Is(err, c.err), "the error is reported: %v", err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
