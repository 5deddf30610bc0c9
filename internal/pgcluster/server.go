package pgcluster

// This file manages one postmaster process: starting it, waiting for it to
// accept connections, and signalling it to stop.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// process is one postmaster incarnation.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait returns
	log  *os.File
}

// prepare applies what initdb and postgres have in common: identity, a
// working directory the server user can access, and an environment without
// PG* variables that could redirect them.
func (c *Cluster) prepare(cmd *exec.Cmd) {
	cmd.Dir = c.dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.acct.credential()}
}

// launch starts a postmaster on c.port and waits for it to accept
// connections. On failure the process is gone again. Callers hold c.mu (or
// own c exclusively, as Start does).
func (c *Cluster) launch(ctx context.Context) error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	logStart, _ := logFile.Seek(0, io.SeekEnd)
	args := append([]string{"-D", c.dataDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", fmt.Sprintf("port=%d", c.port),
		"-c", "unix_socket_directories=" + c.sockDir,
	}, c.args...)
	// Not exec.CommandContext: ctx only bounds startup, not the server's life.
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), args...)
	c.prepare(cmd)
	// Pdeathsig kills the server when we die, even by panic or SIGKILL.
	// Setpgid keeps a terminal's Ctrl-C away from it, so a program that
	// handles SIGINT can still use the database while it cleans up.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	cmd.Stdout, cmd.Stderr = logFile, logFile

	// Pdeathsig fires when the *thread* that forked exits, not the process
	// (go.dev/issue/27505). A Go thread only exits when a goroutine that
	// locked it returns, and the caller's goroutine might be such a one,
	// so fork from a fresh, unlocked goroutine.
	started := make(chan error, 1)
	go func() { started <- cmd.Start() }()
	if err := <-started; err != nil {
		logFile.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: logFile}
	go func() {
		cmd.Wait() // exit status is uninteresting; the log says why
		close(p.done)
	}()
	c.proc = p

	begin := time.Now()
	if err := c.waitReady(ctx, p); err != nil {
		c.shutdown(syscall.SIGQUIT, 5*time.Second)
		logText := readFrom(c.logPath, logStart)
		if strings.Contains(logText, "could not bind") || strings.Contains(logText, "could not create any TCP/IP sockets") {
			err = fmt.Errorf("%w: %w", errBind, err)
		}
		return fmt.Errorf("%w\nserver log tail:\n%s", err, tail([]byte(logText)))
	}
	c.logf("pgcluster: PostgreSQL ready on 127.0.0.1:%d after %v (dir %s)",
		c.port, time.Since(begin).Round(time.Millisecond), c.dir)
	return nil
}

// waitReady polls until a connection succeeds, the process exits, ctx is
// done, or readyTimeout passes.
func (c *Cluster) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// Abort an in-flight probe as soon as the server dies: if a foreign
	// listener holds our port, the probe would otherwise hang on it.
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var last error
	for {
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		err := c.probe(attemptCtx)
		cancelAttempt()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
			continue
		}
		// Report the exit rather than the cancellation it caused.
		select {
		case <-p.done:
			return fmt.Errorf("pgcluster: postgres exited during startup (last connect error: %v)", last)
		default:
			return fmt.Errorf("pgcluster: server not ready: %w (last connect error: %v)", ctx.Err(), last)
		}
	}
}

// probe connects once and checks that the server answering is ours: in the
// window between freePort and our bind, another process could own the port.
func (c *Cluster) probe(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var dataDir string
	if err := conn.QueryRow(ctx, "select current_setting('data_directory')").Scan(&dataDir); err != nil {
		return err
	}
	if dataDir != c.dataDir {
		return fmt.Errorf("port %d is served by another cluster (%s)", c.port, dataDir)
	}
	return nil
}

// shutdown signals the running postmaster and waits up to grace for it to
// exit, escalating to SIGKILL. It is a no-op when nothing is running.
func (c *Cluster) shutdown(sig syscall.Signal, grace time.Duration) error {
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	defer p.log.Close()
	_ = p.cmd.Process.Signal(sig) // fails only if it already exited
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pgcluster: postgres (pid %d) survived SIGKILL", p.cmd.Process.Pid)
	}
	return fmt.Errorf("pgcluster: postgres did not stop within %v after %v; killed it", grace, sig)
}

// freePort asks the kernel for an unused loopback port. Another process may
// take it before postgres binds it; Start retries in that case.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// readFrom returns the content of path from offset on (the current
// incarnation's part of the shared log file).
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// tail returns roughly the last 30 lines of b, enough to show why a server
// failed without flooding test output.
func tail(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
