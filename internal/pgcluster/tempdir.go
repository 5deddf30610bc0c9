package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// dirPrefix names every cluster directory so stale ones can be found.
	dirPrefix = "leaseledger-pg-"
	// ownerFile records the PID of the Go process that created a cluster
	// directory, so a sweep never removes the directory of a live run that
	// is still inside initdb (before postmaster.pid exists).
	ownerFile = "owner.pid"
	// orphanAge is how old a directory without any PID file must be before a
	// sweep treats it as abandoned.
	orphanAge = time.Hour
)

// account is the OS identity initdb and postgres run as. nil means "the
// current user"; it is only set when we are root, because both programs
// refuse to run with uid 0.
type account struct {
	uid, gid uint32
}

// credential returns the SysProcAttr credential for a, or nil.
func (a *account) credential() *syscall.Credential {
	if a == nil {
		return nil
	}
	// Groups: empty (not nil) drops root's supplementary groups.
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{}}
}

// serverAccount picks the identity to run the server as: nobody when root
// (uid/gid from os/user, else the conventional 65534), the caller otherwise.
func serverAccount() *account {
	if os.Geteuid() != 0 {
		return nil
	}
	a := &account{uid: 65534, gid: 65534}
	if u, err := user.Lookup("nobody"); err == nil {
		if uid, err := strconv.ParseUint(u.Uid, 10, 32); err == nil {
			a.uid = uint32(uid)
		}
		if gid, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			a.gid = uint32(gid)
		}
	}
	return a
}

// baseDir picks the directory under which cluster directories are created.
// When the server runs as another user, every ancestor of the cluster
// directory must be searchable by that user, which is not true of e.g. a
// TMPDIR under /root. In that case fall back to /tmp or /var/tmp. (Creating a
// 0755 parent inside an unsearchable TMPDIR would not help: the server user
// still could not get through TMPDIR itself.)
func baseDir(acct *account) (string, error) {
	if acct == nil {
		return os.TempDir(), nil
	}
	candidates := []string{os.TempDir(), "/tmp", "/var/tmp"}
	for _, dir := range candidates {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() && traversable(dir, acct) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("pgcluster: none of %v is traversable by uid %d; set TMPDIR to a world-searchable directory",
		candidates, acct.uid)
}

// traversable reports whether acct may search (x bit) dir and all its
// ancestors.
func traversable(dir string, acct *account) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		perm := fi.Mode().Perm()
		switch {
		case st.Uid == acct.uid:
			if perm&0o100 == 0 {
				return false
			}
		case st.Gid == acct.gid:
			if perm&0o010 == 0 {
				return false
			}
		default:
			if perm&0o001 == 0 {
				return false
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// makeClusterDir creates the per-cluster directory and records our PID in it.
// The directory is handed to acct so initdb can create the data directory and
// postgres can create its socket inside it.
func makeClusterDir(base string, acct *account) (string, error) {
	dir, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return "", fmt.Errorf("pgcluster: create temp dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	if acct != nil {
		if err := os.Chown(dir, int(acct.uid), int(acct.gid)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("pgcluster: chown temp dir: %w", err)
		}
	}
	return dir, nil
}

// sweep removes cluster directories in base left behind by runs that were
// killed before they could clean up (a SIGKILLed test binary, for example:
// postgres dies with it via Pdeathsig, but nobody deletes the files). A
// directory is stale when neither its creating process (owner.pid) nor its
// postmaster (data/postmaster.pid) is alive. Errors are ignored: sweeping is
// best effort and must never make Start fail.
func sweep(base string, logf func(string, ...any)) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if !stale(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			logf("pgcluster: removed stale cluster directory %s", dir)
		}
	}
}

// stale reports whether dir belongs to a run that no longer exists.
func stale(dir string) bool {
	owner, ownerOK := readPID(filepath.Join(dir, ownerFile))
	pm, pmOK := readPID(filepath.Join(dir, "data", "postmaster.pid"))
	if ownerOK && alive(owner) {
		return false
	}
	if pmOK && alive(pm) {
		return false
	}
	if ownerOK || pmOK {
		return true
	}
	// No PID file at all: either a run killed in the instant between
	// MkdirTemp and writing owner.pid, or something we don't understand.
	// Only remove it once it is clearly old.
	fi, err := os.Stat(dir)
	return err == nil && time.Since(fi.ModTime()) > orphanAge
}

// readPID reads the first line of a PID file (postmaster.pid has more lines).
func readPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// alive reports whether a process with this PID exists. EPERM means it exists
// but belongs to someone else, which still counts as alive. A zombie does not
// count: in containers whose PID 1 reaps lazily (or never), a SIGKILLed
// postmaster can linger as a zombie and would otherwise block the sweep.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs: trust kill(2)
	}
	// Format: "pid (comm) S ...". comm may contain spaces and parentheses,
	// so find the state after the last ')'.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}
