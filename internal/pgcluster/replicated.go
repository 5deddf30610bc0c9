package pgcluster

// This file is a primary with a synchronous standby, and what happens to
// such a pair in production: the primary dies and the standby is
// promoted, or an operator switches them over; then the old primary is
// rebuilt as a standby of the new one, so that the next failover can
// happen.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// syncTimeout bounds the wait for a standby to stream and become
// synchronous, and for a promotion to finish.
const syncTimeout = time.Minute

// Replicated is two clusters on loopback: a primary and a standby that
// streams its WAL (built with pg_basebackup -R) and is its synchronous
// standby (synchronous_standby_names = '*', synchronous_commit = on), so
// that every commit the primary acknowledged is on the standby too.
// Clients reach whichever is primary through DSN, a multi-host connection
// string with target_session_attrs=read-write, as production clients of a
// pair without a proxy do.
//
// Roles change only through its methods: KillPrimary or ShutdownPrimary,
// then Promote, then Rejoin. Its methods are safe for concurrent use, but
// a role change is meant to be driven by one goroutine.
type Replicated struct {
	mu      sync.Mutex
	nodes   [2]*Cluster
	primary int // index in nodes
	logf    func(string, ...any)
}

// StartReplicated starts a primary and its synchronous standby, and
// returns once the standby is synchronous. opts is as for Start, with the
// settings replication needs added: synchronous_commit is on even when
// opts.Fast is set (a commit acknowledged only by a primary that then dies
// would be lost, which is not what is tested), and full_page_writes stays
// on. synchronous_standby_names is managed here, set with ALTER SYSTEM on
// the primary only once a standby streams, and cannot be set in
// opts.Settings. The caller must call Stop.
func StartReplicated(ctx context.Context, opts Options) (*Replicated, error) {
	if _, ok := opts.Settings["synchronous_standby_names"]; ok {
		return nil, errors.New("pgcluster: synchronous_standby_names is set by StartReplicated, not by Options.Settings")
	}
	settings := map[string]string{}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	for k, v := range map[string]string{
		"synchronous_commit": "on", "full_page_writes": "on", "wal_level": "replica",
		"hot_standby": "on", "max_wal_senders": "10",
	} {
		settings[k] = v
	}
	opts.Settings = settings
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	primary, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	standby, err := create(opts)
	if err != nil {
		primary.Stop()
		return nil, err
	}
	r := &Replicated{nodes: [2]*Cluster{primary, standby}, logf: logf}
	if err := standby.basebackup(ctx, primary); err != nil {
		r.Stop()
		return nil, err
	}
	if err := standby.launchOnFreePort(ctx); err != nil {
		r.Stop()
		return nil, err
	}
	if err := r.synchronous(ctx); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// DSN returns a connection URL for the postgres superuser naming both
// servers, in a fixed order, with target_session_attrs=read-write: a
// connection goes to whichever accepts writes, trying the other when one
// is down or is the standby.
func (r *Replicated) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		r.nodes[0].port, r.nodes[1].port)
}

// Primary returns the cluster that is primary now (after KillPrimary or
// ShutdownPrimary: the one that was, until Promote).
func (r *Replicated) Primary() *Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[r.primary]
}

// Standby returns the cluster that is standby now.
func (r *Replicated) Standby() *Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[1-r.primary]
}

// KillPrimary kills the primary with SIGKILL (see Cluster.Kill). Writes
// fail until Promote.
func (r *Replicated) KillPrimary() error { return r.Primary().Kill() }

// ShutdownPrimary stops the primary in fast mode, the first step of a
// planned switchover: PostgreSQL sends all of its WAL to the standby
// before it exits, so nothing it committed is missing after Promote.
func (r *Replicated) ShutdownPrimary() error {
	c := r.Primary()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return errors.New("pgcluster: ShutdownPrimary while the primary is not running")
	}
	return c.shutdown(syscall.SIGINT, 15*time.Second)
}

// Promote promotes the standby (pg_ctl promote) once the primary is down,
// and returns when it accepts writes. The promoted server has no
// synchronous standby until Rejoin: it accepts writes alone meanwhile, as
// Patroni's synchronous_mode does (not its strict form).
func (r *Replicated) Promote(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, s := r.nodes[r.primary], r.nodes[1-r.primary]
	if old.running() {
		return errors.New("pgcluster: Promote while the primary still runs: two primaries would take writes")
	}
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "pg_ctl"), "promote", "-D", s.dataDir, "-w", "-t", "60")
	s.prepare(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl promote: %w\n%s", err, tail(out))
	}
	r.primary = 1 - r.primary
	r.logf("pgcluster: promoted the standby on port %d in %v", s.port, time.Since(start).Round(time.Millisecond))
	return nil
}

// Rejoin rebuilds the old primary, which must be down, as a standby of
// the new one (its data directory replaced by a pg_basebackup, since a
// killed primary may hold WAL the new one never received), starts it on
// its port, and returns once it is the new primary's synchronous standby.
func (r *Replicated) Rejoin(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, s := r.nodes[r.primary], r.nodes[1-r.primary]
	if s.running() {
		return errors.New("pgcluster: Rejoin while the old primary still runs")
	}
	if err := os.RemoveAll(s.dataDir); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := s.basebackup(ctx, p); err != nil {
		return err
	}
	s.mu.Lock()
	err := s.launch(ctx)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return r.synchronousLocked(ctx)
}

// Stop stops both servers and removes their directories.
func (r *Replicated) Stop() error {
	return errors.Join(r.nodes[0].Stop(), r.nodes[1].Stop())
}

func (r *Replicated) synchronous(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synchronousLocked(ctx)
}

// synchronousLocked waits until the standby streams from the primary,
// then makes it the synchronous standby and waits until it is. The name
// is set on the primary alone, after the standby's base backup was taken,
// so that a standby never starts with it: once promoted it must take
// writes before a standby of its own joins.
func (r *Replicated) synchronousLocked(ctx context.Context) error {
	p := r.nodes[r.primary]
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		return fmt.Errorf("pgcluster: connect to the primary: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	wait := func(what, query string) error {
		for {
			var ok bool
			if err := conn.QueryRow(ctx, query).Scan(&ok); err != nil {
				return fmt.Errorf("pgcluster: wait for the standby to %s: %w", what, err)
			}
			if ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("pgcluster: the standby did not %s: %w", what, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if err := wait("stream", `SELECT count(*) > 0 FROM pg_catalog.pg_stat_replication WHERE state = 'streaming'`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_reload_conf()`); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := wait("become synchronous", `SELECT count(*) > 0 FROM pg_catalog.pg_stat_replication WHERE sync_state = 'sync'`); err != nil {
		return err
	}
	r.logf("pgcluster: the standby on port %d is synchronous to the primary on port %d", r.nodes[1-r.primary].port, p.port)
	return nil
}

// running reports whether the server process is up.
func (c *Cluster) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != nil
}

// basebackup fills c's (absent) data directory with a base backup of
// from, written as a standby of it (-R: standby.signal and
// primary_conninfo).
func (c *Cluster) basebackup(ctx context.Context, from *Cluster) error {
	bin := filepath.Join(c.binDir, "pg_basebackup")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("pgcluster: pg_basebackup is not beside the server binaries: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-D", c.dataDir, "-R", "-X", "stream", "-c", "fast", "--no-sync",
		"-h", "127.0.0.1", "-p", strconv.Itoa(from.port), "-U", "postgres")
	c.prepare(cmd)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: pg_basebackup: %w\n%s", err, strings.TrimSpace(tail(out)))
	}
	c.logf("pgcluster: base backup of port %d into %s took %v", from.port, c.dataDir, time.Since(start).Round(time.Millisecond))
	return nil
}
