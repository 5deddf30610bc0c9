// Package pgcluster starts a throwaway PostgreSQL cluster from locally
// installed server binaries. It serves test binaries (through
// internal/pgtest) as well as command-line programs such as benchmarks and
// demos, so it deliberately depends on nothing from package testing.
//
// The postgres process is a direct child of the calling process with
// Pdeathsig=SIGKILL, so it cannot outlive its parent even if that parent
// panics or is killed; directories left behind by such runs are swept by the
// next Start.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configures Start. The zero value is a durable, default cluster.
type Options struct {
	// Fast turns off durability (fsync, synchronous_commit,
	// full_page_writes) for speed. Use it for tests, which never need the
	// data to survive an OS crash. Settings may override individual values.
	Fast bool
	// Logf, if non-nil, receives progress messages (start, stop, sweeps).
	Logf func(format string, args ...any)
	// Settings are extra server parameters passed as -c name=value.
	// port, listen_addresses and unix_socket_directories are managed by
	// the package and cannot be overridden, since DSN depends on them.
	Settings map[string]string
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster. Its
// methods are safe for concurrent use.
type Cluster struct {
	binDir  string
	dir     string // per-cluster temp dir; removed by Stop
	dataDir string
	sockDir string // "" when the path would be too long for a Unix socket
	logPath string
	port    int
	acct    *account
	args    []string // -c settings, fixed at Start so Restart reuses them
	logf    func(string, ...any)

	mu      sync.Mutex
	proc    *process // nil while not running
	stopped bool
}

const (
	readyTimeout = 30 * time.Second
	portAttempts = 5
	// maxSocketPath is sun_path's size on Linux minus the NUL terminator.
	maxSocketPath = 107
)

// errBind marks a start failure caused by the port being taken between
// picking it and the server binding it, which Start retries.
var errBind = errors.New("port already in use")

// Start initializes a new cluster in a fresh temporary directory and starts
// it on a free loopback port, returning once it accepts connections. The
// caller must call Stop. ctx bounds initialization and startup only; the
// server keeps running after ctx is done.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := create(opts)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(c.dir)
		}
	}()
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	if err := c.launchOnFreePort(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// create makes the directory of a new cluster, with its socket directory,
// and returns the cluster, not yet initialized nor running. The caller
// removes c.dir if it does not go on to start it.
func create(opts Options) (*Cluster, error) {
	binDir, err := Find()
	if err != nil {
		return nil, err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	acct := serverAccount()
	base, err := baseDir(acct)
	if err != nil {
		return nil, err
	}
	sweep(base, logf)
	dir, err := makeClusterDir(base, acct)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		binDir:  binDir,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		acct:    acct,
		args:    settingArgs(opts),
		logf:    logf,
	}
	if sock := filepath.Join(dir, "sock"); len(sock)+len("/.s.PGSQL.65535") <= maxSocketPath {
		if err := os.Mkdir(sock, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
		if acct != nil {
			if err := os.Chown(sock, int(acct.uid), int(acct.gid)); err != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("pgcluster: %w", err)
			}
		}
		c.sockDir = sock
	}
	return c, nil
}

// launchOnFreePort starts the server on a free loopback port, trying
// another one when the port was taken before the server bound it.
func (c *Cluster) launchOnFreePort(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		var err error
		if c.port, err = freePort(); err != nil {
			return err
		}
		err = c.launch(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errBind) || attempt == portAttempts || ctx.Err() != nil {
			return err
		}
		c.logf("pgcluster: port %d was taken before the server bound it; retrying", c.port)
	}
}

// settingArgs builds the -c arguments: fast-mode defaults, then the caller's
// settings, then the values DSN depends on.
func settingArgs(opts Options) []string {
	s := map[string]string{"max_connections": "200"}
	if opts.Fast {
		s["fsync"] = "off"
		s["synchronous_commit"] = "off"
		s["full_page_writes"] = "off"
	}
	for k, v := range opts.Settings {
		s[k] = v
	}
	keys := make([]string, 0, len(s))
	for k := range s {
		switch k {
		case "port", "listen_addresses", "unix_socket_directories":
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, "-c", k+"="+s[k])
	}
	return args
}

// DSN returns a libpq/pgx connection URL for the postgres superuser.
func (c *Cluster) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port returns the loopback TCP port the server listens on. It stays the
// same across Restart.
func (c *Cluster) Port() int { return c.port }

// DataDir returns the cluster's data directory (PGDATA).
func (c *Cluster) DataDir() string { return c.dataDir }

// BinDir returns the directory holding the server binaries in use.
func (c *Cluster) BinDir() string { return c.binDir }

// Stop shuts the server down (fast mode: SIGINT, escalating to SIGKILL if it
// does not exit within 15s) and removes the temporary directory.
// Calling it again is a no-op returning nil.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	err := c.shutdown(syscall.SIGINT, 15*time.Second)
	if rmErr := os.RemoveAll(c.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("pgcluster: remove %s: %w", c.dir, rmErr)
	}
	c.logf("pgcluster: stopped cluster on port %d", c.port)
	return err
}

// Crash stops the server in immediate mode (SIGQUIT): no checkpoint, so the
// next start goes through crash recovery, as after a power loss of the
// server process (though not of the OS: written WAL is in the page cache).
// The data directory is kept for Restart.
//
// A crash loses the commits the server had acknowledged but not yet
// flushed when synchronous_commit is off, as Options.Fast sets it: a test
// that checks what survives a crash must start its cluster with
// synchronous_commit on.
func (c *Cluster) Crash() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("pgcluster: Crash on a stopped cluster")
	}
	if c.proc == nil {
		return errors.New("pgcluster: Crash while the server is not running")
	}
	return c.shutdown(syscall.SIGQUIT, 10*time.Second)
}

// Kill kills the server with SIGKILL, the postmaster and every backend
// at once (see crash), as the loss of the machine it
// runs on would: no backend finishes what it was doing, no WAL is sent to
// a standby after the kill. The data directory is kept for Restart.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("pgcluster: Kill on a stopped cluster")
	}
	p := c.proc
	if p == nil {
		return errors.New("pgcluster: Kill while the server is not running")
	}
	c.proc = nil
	defer p.log.Close()
	if err := crash(p.cmd.Process.Pid); err != nil {
		return fmt.Errorf("pgcluster: kill: %w", err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pgcluster: postgres (pid %d) survived SIGKILL", p.cmd.Process.Pid)
	}
}

// Restart starts the server again on the same port and data directory,
// crashing it first if it is still running, and waits until it accepts
// connections.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("pgcluster: Restart on a stopped cluster")
	}
	if c.proc != nil {
		if err := c.shutdown(syscall.SIGQUIT, 10*time.Second); err != nil {
			return err
		}
	}
	return c.launch(ctx)
}

// initdb creates the data directory.
func (c *Cluster) initdb(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "initdb"),
		"-D", c.dataDir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "--locale=C")
	c.prepare(cmd)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: initdb failed: %w\n%s", err, tail(out))
	}
	c.logf("pgcluster: initdb %s took %v", c.dataDir, time.Since(start).Round(time.Millisecond))
	return nil
}

// crash kills the postmaster pid and every process it started, at once,
// as a machine that loses power would. A signal to the postmaster's
// process group (it leads one: Setpgid in launch) is not enough:
// PostgreSQL makes each child the leader of a session of its own
// (InitPostmasterChild calls setsid), so its backends and WAL sender
// would go on, taking a statement, committing it and streaming it to a
// standby, until they notice the postmaster is gone. The postmaster is
// stopped first, so that it starts no child while they are found.
func crash(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	for _, child := range childrenOf(pid) {
		_ = syscall.Kill(child, syscall.SIGKILL) // it may have ended meanwhile
	}
	return syscall.Kill(-pid, syscall.SIGKILL)
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and
		// parentheses, so the fields are read after its last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
