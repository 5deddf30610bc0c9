package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that the stores implement both contracts.
var (
	_ ledger.Ledger              = (*Store)(nil)
	_ ledger.FenceRejecter       = (*Store)(nil)
	_ ledger.BatchEnqueuer       = (*Store)(nil)
	_ ledger.AckProcessor        = (*Store)(nil)
	_ ledger.ClaimStore          = (*Outbox)(nil)
	_ ledger.DueClaimer          = (*Outbox)(nil)
	_ ledger.OutboxBatchEnqueuer = (*Outbox)(nil)
)

// DefaultSchema is the schema a Store uses unless WithSchema says otherwise.
const DefaultSchema = "leaseledger"

// DefaultMaxRetries is how many times a Store retries a transaction that
// failed with a safely retryable error, unless WithMaxRetries says otherwise.
const DefaultMaxRetries = 3

// MaxPayloadLimit bounds WithMaxPayload: ledger.MaxPayloadLimit, the same
// bound memstore keeps.
const MaxPayloadLimit = ledger.MaxPayloadLimit

// schemaName is what WithSchema accepts: an identifier-like name, so that
// it reads the same quoted or not and never needs escaping by an operator.
var schemaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// checkSchema returns the error for a schema name WithSchema refuses:
// one schemaName does not match, or one of the system's (a pg_ prefix,
// which PostgreSQL reserves, or information_schema), in any case; nil for
// a name it accepts.
func checkSchema(name string) error {
	lower := strings.ToLower(name)
	switch {
	case !schemaName.MatchString(name):
		return &ledger.InvalidError{Field: "schema", Reason: "must be 1 to 63 bytes of [A-Za-z0-9_], not starting with a digit"}
	case strings.HasPrefix(lower, "pg_"):
		return &ledger.InvalidError{Field: "schema", Reason: "must not start with pg_, which PostgreSQL reserves for its own schemas"}
	case lower == "information_schema":
		return &ledger.InvalidError{Field: "schema", Reason: "must not be information_schema, the system catalog's"}
	}
	return nil
}

// config is what the Options set.
type config struct {
	schema     string
	defaults   ledger.Policy
	maxPayload int
	clock      func() time.Time
	maxRetries int
	notify     bool // NOTIFY on enqueue (WithNotify)
	// wakeInterval spaces the values of Listen (WithWakeInterval).
	wakeInterval time.Duration
	noHistory    bool // append no history entries (WithoutHistory)
	// Clock skew (clock.go): decide on the database's clock, and warn
	// through logger when a caller's now is further than skewThreshold
	// from it.
	dbClock       bool
	noSkewCheck   bool // WithoutSkewCheck
	logger        *slog.Logger
	skewThreshold time.Duration
	group         groupConfig        // group commit (group.go)
	bounds        ledger.QueueBounds // the targets' queue bounds (bound.go)
	err           error              // the first invalid option
}

// Option configures New.
type Option func(*config)

// WithSchema sets the PostgreSQL schema that holds the store's tables
// (default DefaultSchema). The name must be 1 to 63 bytes of ASCII letters,
// digits and underscores, not starting with a digit, and not one of the
// system's: a name starting with pg_ (PostgreSQL reserves them, and
// Migrate could not create one) or information_schema (the SQL standard's
// catalog views), in any case. Anything else makes New fail with
// ErrInvalid. Migrate creates the schema if it is missing.
func WithSchema(name string) Option {
	return func(c *config) {
		if err := checkSchema(name); err != nil {
			c.fail(err)
			return
		}
		c.schema = name
	}
}

// WithDefaultPolicy sets the policy whose fields fill a request's zero
// policy fields at Enqueue. Its own zero fields take ledger.DefaultPolicy().
// A malformed policy makes New fail with ErrInvalid.
func WithDefaultPolicy(p ledger.Policy) Option {
	return func(c *config) {
		if err := p.Validate("default policy"); err != nil {
			c.fail(err)
			return
		}
		c.defaults = p.Resolve(ledger.DefaultPolicy())
	}
}

// WithMaxPayload sets the largest payload Enqueue accepts, in bytes, for
// deliveries and outbox envelopes (default ledger.DefaultMaxPayload); 1 to
// MaxPayloadLimit, else New fails with ErrInvalid.
func WithMaxPayload(n int) Option {
	return func(c *config) {
		if n < 1 || n > MaxPayloadLimit {
			c.fail(&ledger.InvalidError{Field: "max payload", Reason: fmt.Sprintf("must be between 1 and %d", MaxPayloadLimit)})
			return
		}
		c.maxPayload = n
	}
}

// WithClock sets the clock that stamps UpdatedAt, CreatedAt and EndedAt in
// the outbox methods that carry no now (Outbox.Enqueue, Save and the base
// completions) and the applied_at of migrations. It never decides
// anything; every method that takes a now uses the caller's (or, with
// WithDatabaseClock, the database's). Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.fail(&ledger.InvalidError{Field: "clock", Reason: "must not be nil"})
			return
		}
		c.clock = now
	}
}

// WithMaxRetries sets how many times a call retries its transaction after
// an error that is safe to retry (default DefaultMaxRetries; 0 turns
// retries off). Only errors raised before anything was sent, serialization
// failures (SQLSTATE 40001) and deadlocks (40P01) are retried, and never
// inside a caller's transaction (WithTx).
func WithMaxRetries(n int) Option {
	return func(c *config) {
		if n < 0 || n > 100 {
			c.fail(&ledger.InvalidError{Field: "max retries", Reason: "must be between 0 and 100"})
			return
		}
		c.maxRetries = n
	}
}

func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// dbtx is what a Store runs statements on: the pool, or the caller's
// transaction (WithTx). Both open nested units with Begin: a transaction
// on the pool, a savepoint inside a transaction.
type dbtx interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store is the PostgreSQL delivery ledger. It implements ledger.Ledger and
// ledger.BatchEnqueuer; Outbox returns the outbox claim store over the same
// database. A Store is safe for concurrent use by many goroutines and many
// processes on many machines: every call is one short transaction (or a
// share of one, see WithGroupCommit), leases and claims are row state, and
// no lock, transaction or session state outlives a call.
type Store struct {
	db       dbtx
	callerTx bool // db is the caller's transaction: no commits, no retries
	cfg      config
	q        *queries
	skew     *skewMeter // shared with the stores WithTx derives
	groups   *groups    // group commit queues (group.go); nil when off
	pool     *pgxpool.Pool
	arrays   *arraySenders // how statements of binary arrays go (params.go)
	// held are the records this store holds grants on (held.go); nil
	// for a store bound to a caller's transaction, which never uses them.
	held *heldState
	// leases and claims bound the grant statements run at once (trip.go).
	leases, claims gate
	// outbox is what Outbox returns: one value per Store, so that the
	// loops of a process polling this outbox know it is one queue.
	outbox *Outbox
}

// New returns a store on pool. It checks the options but does not touch
// the database; call Migrate before first use. A nil pool or an invalid
// option is ErrInvalid.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	cfg := config{
		schema:     DefaultSchema,
		defaults:   ledger.DefaultPolicy(),
		maxPayload: ledger.DefaultMaxPayload,
		clock:      time.Now,
		maxRetries: DefaultMaxRetries,
		// Not a package variable of ours: the process's default logger
		// is where a host expects a library's warnings to go.
		logger:        slog.Default(),
		skewThreshold: DefaultSkewThreshold,
		group:         defaultGroupConfig(),
		wakeInterval:  DefaultWakeInterval,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, fmt.Errorf("pgstore: new: %w", cfg.err)
	}
	if pool == nil {
		return nil, fmt.Errorf("pgstore: new: %w", &ledger.InvalidError{Field: "pool", Reason: "must not be nil"})
	}
	s := &Store{db: pool, pool: pool, arrays: &arraySenders{pool: pool}, cfg: cfg, q: newQueries(cfg.schema), skew: &skewMeter{}}
	s.held = newHeldState(cfg.schema, s.q)
	s.leases, s.claims = newGate(), newGate()
	s.groups = newGroups(s)
	s.outbox = &Outbox{s: s}
	return s, nil
}

// Schema returns the schema that holds the store's tables.
func (s *Store) Schema() string { return s.cfg.schema }

// WithTx returns a store that runs every call inside tx, the caller's own
// transaction, so that an enqueue or a transition commits or rolls back
// together with the caller's business writes. The store never commits or
// rolls back tx: each call runs in a savepoint of it, released when the
// call succeeds and rolled back when it fails, so a failed call leaves tx
// usable. Every statement a call sends runs inside a savepoint, reads and
// the database clock read (WithDatabaseClock) included: nothing the store
// runs can abort the caller's transaction. Calls made through it are not
// retried, and their locks are held until the caller ends tx: keep such
// transactions short. A nil tx makes every call fail with ErrInvalid.
//
// Note that a delivery enqueued in tx is invisible to other transactions
// (and so cannot be leased) until tx commits.
func (s *Store) WithTx(tx pgx.Tx) *Store {
	c := *s
	c.callerTx = true
	c.db = tx // a nil tx gives a nil db, which check rejects
	c.held = nil
	c.outbox = &Outbox{s: &c}
	return &c
}

// Outbox returns the outbox claim store over the same database, schema,
// options and (for a store returned by WithTx) transaction; the same
// value on every call.
func (s *Store) Outbox() *Outbox {
	if s.outbox == nil { // a Store not made by New, which every call refuses
		return &Outbox{s: s}
	}
	return s.outbox
}

// Outbox is the PostgreSQL outbox store. It implements ledger.ClaimStore
// and ledger.OutboxBatchEnqueuer. It is a separate type from Store only
// because both contracts have methods named Enqueue and MarkFailed with
// different signatures; get one with Store.Outbox.
type Outbox struct {
	s *Store
}

// WithTx returns an outbox whose calls run inside tx, like Store.WithTx.
func (o *Outbox) WithTx(tx pgx.Tx) *Outbox { return o.s.WithTx(tx).Outbox() }

// check runs the checks every exported method makes first: a non-nil
// context, a usable database handle, then the call's own validation.
func (s *Store) check(ctx context.Context, errs ...error) error {
	if err := storekit.ValidateContext(ctx); err != nil {
		return err
	}
	if s.db == nil {
		return &ledger.InvalidError{Field: "tx", Reason: "must not be nil"}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
