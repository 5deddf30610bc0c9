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
	panicked := &pgconn.PgError{Severity: "PANIC", SeverityUnlocalized: "PANIC", Code: "XX000", Message: "could not write to file"}
	refused := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40001", Message: "could not serialize access"}
	deadlock := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40P01", Message: "deadlock detected"}
	// PgBouncer answers so when its link to the server drops: the
	// server may have committed first. It sends no unlocalised severity.
	pooler := &pgconn.PgError{Severity: "ERROR", Code: "08P01", Message: "server conn crashed?"}
	cancelled := &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "57014", Message: "canceling statement due to statement timeout"}
	fatalRollback := &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "40001", Message: "could not serialize access"}
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
		{name: "a serialization failure", err: refused, wantErr: true},
		{name: "a deadlock", err: deadlock, wantErr: true},
		{name: "a FATAL response: the backend may end after the commit record", err: fatal, wantUnknown: true, wantErr: true},
		{name: "a FATAL response of class 40", err: fatalRollback, wantUnknown: true, wantErr: true},
		{name: "a PANIC", err: panicked, wantUnknown: true, wantErr: true},
		{name: "a pooler's lost server link (class 08)", err: pooler, wantUnknown: true, wantErr: true},
		{name: "another ERROR: not known to roll back", err: cancelled, wantUnknown: true, wantErr: true},
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
