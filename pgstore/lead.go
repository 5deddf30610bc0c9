package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores keep leads.
var (
	_ ledger.Elector = (*Store)(nil)
	_ ledger.Elector = (*Outbox)(nil)
)

// This file holds the leadership leases of ledger.Elector, in the table
// of migrations/0009_leads.sql. Each call is one short transaction that
// locks the lead's row (FOR UPDATE), applies the root package's
// transition (storekit.Lead.Take, Renew, Release) in Go and writes the row
// back only when it applied; a take first reads the row without a lock
// and answers at once when the lead is held. Nothing is held between calls: a holder
// that dies leaves a row whose expiry passes. The statements sit here
// rather than in query.go, as retention's sit in purge.go, so that leads
// stay in one file; their text is the same on every call, so pgx's
// statement cache prepares each once per connection.

const leadColumns = "name, holder, token, seq, taken_at, expires_at"

// leadSQL holds the statements on one schema's leads.
type leadSQL struct {
	lock, get, insert, update string
}

func newLeadSQL(schema string) leadSQL {
	t := pgx.Identifier{schema, "leads"}.Sanitize()
	return leadSQL{
		lock: "SELECT " + leadColumns + " FROM " + t + " WHERE name = $1 FOR UPDATE",
		get:  "SELECT " + leadColumns + " FROM " + t + " WHERE name = $1",
		// A take of a name never taken races other takes of it: ON
		// CONFLICT DO NOTHING waits for the one that inserted first and
		// then inserts nothing, and the take reads that row instead.
		insert: "INSERT INTO " + t + " (" + leadColumns + ") VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
		// The row is locked; seq = $7 guards the write anyway, so that a
		// write computed from another term can never land.
		update: "UPDATE " + t + " SET holder = $2, token = $3, seq = $4, taken_at = $5, expires_at = $6 WHERE name = $1 AND seq = $7",
	}
}

func scanLead(row pgx.Row) (ledger.Lead, error) {
	var l ledger.Lead
	var token string
	if err := row.Scan(&l.Name, &l.Holder, &token, &l.Seq, &l.TakenAt, &l.ExpiresAt); err != nil {
		return ledger.Lead{}, err
	}
	l.Token = ledger.Token(token)
	l.TakenAt, l.ExpiresAt = ledger.Normalize(l.TakenAt), ledger.Normalize(l.ExpiresAt)
	return l, nil
}

func leadArgs(l ledger.Lead) []any {
	return []any{l.Name, l.Holder, string(l.Token), l.Seq, l.TakenAt, l.ExpiresAt}
}

// TakeLead makes holder the holder of the lead name until now+ttl when
// nobody holds it at now (storekit.Lead.Take): OutcomeApplied, with a new
// term and token. A lead held at now answers OutcomeWrongOwner with the
// lead as it stands, without its token, and writes nothing. Concurrent
// takes of one name are serialised on its row, so only one applies.
// With WithDatabaseClock the database's clock decides instead of now.
// Errors: ErrInvalid, ctx.Err(), ErrNotMigrated, and database errors
// wrapped with the operation name.
func (s *Store) TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	if err := s.check(ctx, storekit.ValidateTakeLead(name, holder, now, ttl)); err != nil {
		return ledger.LeadResult{}, err
	}
	now, err := s.decisionTime(ctx, "take lead", now)
	if err != nil {
		return ledger.LeadResult{}, err
	}
	q := newLeadSQL(s.cfg.schema)
	token := storekit.NewToken()
	// A lead held at now answers WrongOwner whatever happens after, so a
	// take first reads the row without a lock: of a fleet's sweepers,
	// all but the leader find it held at every sweep, and they neither
	// lock the row nor wait for each other's transactions. Only a take
	// that may apply locks it, and the locked read decides.
	var held ledger.LeadResult
	err = s.read(ctx, "take lead", func(db dbtx) error {
		cur, err := scanLead(db.QueryRow(ctx, q.get, name))
		if noRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, out := storekit.Lead(cur).Take(holder, token, now, ttl); out != ledger.OutcomeApplied {
			held = ledger.LeadResult{Outcome: out, Lead: cur.Public()}
		}
		return nil
	})
	if err != nil {
		return ledger.LeadResult{}, err
	}
	if held.Outcome != "" {
		return held, nil
	}
	var res ledger.LeadResult
	err = s.inTx(ctx, "take lead", func(tx pgx.Tx) (bool, error) {
		res = ledger.LeadResult{}
		// Twice at most: a first take of the name that lost the insert
		// to a concurrent one finds that one's committed row next.
		for range 2 {
			cur, err := scanLead(tx.QueryRow(ctx, q.lock, name))
			if noRows(err) {
				next, out := storekit.Lead{Name: name}.Take(holder, token, now, ttl)
				tag, err := tx.Exec(ctx, q.insert, leadArgs(next)...)
				if err != nil {
					return false, err
				}
				if tag.RowsAffected() == 0 {
					continue
				}
				res = ledger.LeadResult{Outcome: out, Lead: next}
				return true, nil
			}
			if err != nil {
				return false, err
			}
			next, out := storekit.Lead(cur).Take(holder, token, now, ttl)
			if out != ledger.OutcomeApplied {
				res = ledger.LeadResult{Outcome: out, Lead: cur.Public()}
				return false, nil
			}
			res = ledger.LeadResult{Outcome: out, Lead: next}
			return true, s.writeLead(ctx, tx, q, cur, next)
		}
		return false, fmt.Errorf("lead %s: inserted by another take but not found", name)
	})
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return res, nil
}

// RenewLead moves the expiry of the lead in force to now+ttl
// (storekit.Lead.Renew). Outcomes: Applied, NotFound, LeaseLost,
// LeaseExpired; a call that does not apply writes nothing. Errors as
// TakeLead.
func (s *Store) RenewLead(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	if err := s.check(ctx, storekit.ValidateRenewLead(lead, now, ttl)); err != nil {
		return ledger.LeadResult{}, err
	}
	return s.leadTransition(ctx, "renew lead", lead.Name, now, func(cur ledger.Lead, now time.Time) (ledger.Lead, ledger.Outcome) {
		return storekit.Lead(cur).Renew(lead, now, ttl)
	})
}

// ReleaseLead gives the lead up at now (storekit.Lead.Release), so that
// another holder can take it at once. Outcomes: Applied, NotFound,
// LeaseLost, LeaseExpired; a call that does not apply writes nothing.
// Errors as TakeLead.
func (s *Store) ReleaseLead(ctx context.Context, lead ledger.Lead, now time.Time) (ledger.LeadResult, error) {
	if err := s.check(ctx, storekit.ValidateReleaseLead(lead, now)); err != nil {
		return ledger.LeadResult{}, err
	}
	res, err := s.leadTransition(ctx, "release lead", lead.Name, now, func(cur ledger.Lead, now time.Time) (ledger.Lead, ledger.Outcome) {
		return storekit.Lead(cur).Release(lead, now)
	})
	res.Lead = res.Lead.Public() // a lead given up is no capability any more
	return res, err
}

// GetLead returns the lead name without its token, or ErrNotFound when it
// was never taken.
func (s *Store) GetLead(ctx context.Context, name string) (ledger.Lead, error) {
	if err := s.check(ctx, storekit.ValidateGetLead(name)); err != nil {
		return ledger.Lead{}, err
	}
	var l ledger.Lead
	err := s.read(ctx, "get lead", func(db dbtx) error {
		var err error
		l, err = scanLead(db.QueryRow(ctx, newLeadSQL(s.cfg.schema).get, name))
		if noRows(err) {
			return ledger.ErrNotFound
		}
		return err
	})
	if err != nil {
		return ledger.Lead{}, err
	}
	return l.Public(), nil
}

// leadTransition applies step to the locked row of the lead name at the
// decision time: NotFound when there is none, the row unchanged (shown
// without its token) when step does not apply.
func (s *Store) leadTransition(ctx context.Context, op, name string, now time.Time, step func(ledger.Lead, time.Time) (ledger.Lead, ledger.Outcome)) (ledger.LeadResult, error) {
	now, err := s.decisionTime(ctx, op, now)
	if err != nil {
		return ledger.LeadResult{}, err
	}
	q := newLeadSQL(s.cfg.schema)
	var res ledger.LeadResult
	err = s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		res = ledger.LeadResult{}
		cur, err := scanLead(tx.QueryRow(ctx, q.lock, name))
		if noRows(err) {
			res.Outcome = ledger.OutcomeNotFound
			return false, nil
		}
		if err != nil {
			return false, err
		}
		next, out := step(cur, now)
		if out != ledger.OutcomeApplied {
			res = ledger.LeadResult{Outcome: out, Lead: cur.Public()}
			return false, nil
		}
		res = ledger.LeadResult{Outcome: out, Lead: next}
		return true, s.writeLead(ctx, tx, q, cur, next)
	})
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return res, nil
}

// writeLead writes next over the locked row that held cur.
func (s *Store) writeLead(ctx context.Context, tx pgx.Tx, q leadSQL, cur, next ledger.Lead) error {
	tag, err := tx.Exec(ctx, q.update, append(leadArgs(next), cur.Seq)...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("lead %s: %w", cur.Name, errRowChanged)
	}
	return nil
}

// TakeLead is Store.TakeLead: the outbox and the ledger share one table
// of leads.
func (o *Outbox) TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	return o.s.TakeLead(ctx, name, holder, now, ttl)
}

// RenewLead is Store.RenewLead.
func (o *Outbox) RenewLead(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	return o.s.RenewLead(ctx, lead, now, ttl)
}

// ReleaseLead is Store.ReleaseLead.
func (o *Outbox) ReleaseLead(ctx context.Context, lead ledger.Lead, now time.Time) (ledger.LeadResult, error) {
	return o.s.ReleaseLead(ctx, lead, now)
}

// GetLead is Store.GetLead.
func (o *Outbox) GetLead(ctx context.Context, name string) (ledger.Lead, error) {
	return o.s.GetLead(ctx, name)
}
