package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoBouncer reports that no pgbouncer binary was found.
var ErrNoBouncer = errors.New("pgcluster: pgbouncer not found on PATH or in /usr/sbin; install it (Debian: apt-get install pgbouncer)")

// Bouncer is a PgBouncer in transaction pooling mode in front of one
// PostgreSQL server: the set-up many production deployments put between
// their workers and the database, and the one where session state (LISTEN,
// session advisory locks, named prepared statements) does not survive
// from one transaction to the next.
type Bouncer struct {
	dir  string
	port int
	user string
	cmd  *exec.Cmd
	done chan struct{}
}

// FindBouncer returns the path of the pgbouncer binary.
func FindBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if p := "/usr/sbin/pgbouncer"; executable(p) {
		return p, nil
	}
	return "", ErrNoBouncer
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0
}

// StartBouncer starts a pgbouncer on a free loopback port in front of the
// server that upstream (a postgres:// URL with host, port, user and
// optionally password) names, in transaction pooling mode with poolSize
// server connections. The caller must call Stop.
func StartBouncer(ctx context.Context, upstream string, poolSize int) (*Bouncer, error) {
	bin, err := FindBouncer()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: upstream URL: %w", err)
	}
	acct := serverAccount() // pgbouncer refuses to run as root, like postgres
	base, err := baseDir(acct)
	if err != nil {
		return nil, err
	}
	dir, err := makeClusterDir(base, acct)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Bouncer{dir: dir, port: port, user: u.User.Username(), done: make(chan struct{})}
	if err := b.writeConfig(u, poolSize); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Dir = dir
	// Like the postmaster: dies with us, and a terminal's Ctrl-C does not
	// reach it before we have cleaned up.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: acct.credential(), Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: start pgbouncer: %w", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// writeConfig writes pgbouncer.ini. Authentication is "any": the bouncer
// logs in upstream as the upstream URL's user whoever connects, which is
// what a loopback-only throwaway set-up wants.
func (b *Bouncer) writeConfig(u *url.URL, poolSize int) error {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	db := fmt.Sprintf("host=%s port=%s user=%s", host, port, u.User.Username())
	if pw, ok := u.User.Password(); ok {
		db += " password=" + pw
	}
	cfg := strings.Join([]string{
		"[databases]",
		"* = " + db,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.port),
		"unix_socket_dir =",
		"auth_type = any",
		"pool_mode = transaction",
		"default_pool_size = " + strconv.Itoa(poolSize),
		"max_client_conn = 500",
		// pgx sends these at startup; a bouncer must accept and drop them,
		// since a pooled server connection cannot carry one client's
		// settings.
		"ignore_startup_parameters = extra_float_digits,search_path,application_name",
		"logfile = " + filepath.Join(b.dir, "pgbouncer.log"),
		"pidfile = " + filepath.Join(b.dir, "pgbouncer.pid"),
		"",
	}, "\n")
	return os.WriteFile(filepath.Join(b.dir, "pgbouncer.ini"), []byte(cfg), 0o644)
}

// waitReady waits until the bouncer accepts TCP connections.
func (b *Bouncer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
			return fmt.Errorf("pgcluster: pgbouncer exited at start:\n%s", tail(log))
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: pgbouncer not ready on %s: %w", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DSN returns a pgx connection URL through the bouncer. It asks pgx for
// unnamed prepared statements (default_query_exec_mode=exec), since named
// ones do not survive transaction pooling.
func (b *Bouncer) DSN() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable&default_query_exec_mode=exec", b.user, b.port)
}

// Stop terminates the bouncer and removes its directory.
func (b *Bouncer) Stop() error {
	var err error
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
			err = errors.New("pgcluster: pgbouncer did not stop on SIGTERM; killed it")
		}
	}
	if rmErr := os.RemoveAll(b.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("pgcluster: %w", rmErr)
	}
	return err
}
