package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What a drain costs, beside how fast it went: the WAL it made the server
// write and the CPU it took, each divided by the items drained. WAL bytes
// per item depend on the schema and the statements, not on the machine, so
// they compare across machines and runs where rates do not. CPU is split
// into the client (this process, where the store's Go code runs: user and
// system time from getrusage) and the server (the postmaster and its
// children, from /proc, as long as the server runs on this machine).

// procRoot is where the kernel shows its processes.
const procRoot = "/proc"

// clockTicks is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which is 100 on every Linux architecture Go supports.
const clockTicks = 100

// meterReading is what meter read at one moment.
type meterReading struct {
	// lsn is the server's WAL position (pg_current_wal_lsn); 0 in memory.
	lsn uint64
	// client is this process's user and system CPU so far.
	client time.Duration
	// server is the server's CPU so far; 0 unless env.postmaster is
	// known.
	server time.Duration
}

// meter reads the WAL position and the CPU counters. The reading's own
// query adds a few hundred microseconds to a window, which is nothing per
// item of a drain.
func (e *env) meter(ctx context.Context) (meterReading, error) {
	var m meterReading
	if e.pool != nil {
		var lsn string
		if err := e.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return m, fmt.Errorf("read the WAL position: %w", err)
		}
		var err error
		if m.lsn, err = parseLSN(lsn); err != nil {
			return m, err
		}
	}
	m.client = processCPU()
	if e.postmaster > 0 {
		s, err := serverCPU(procRoot, e.postmaster)
		if err != nil {
			return m, fmt.Errorf("read the server's CPU: %w", err)
		}
		m.server = s
	}
	return m, nil
}

// windowCost is what the items of one window cost each.
type windowCost struct {
	walBytes     float64 // WAL bytes per item; PostgreSQL only
	clientMicros float64 // client CPU µs per item
	serverMicros float64 // server CPU µs per item, when measured
}

// costPerItem divides what was spent between two readings by n items.
func costPerItem(before, after meterReading, n int) windowCost {
	items := float64(max(n, 1))
	return windowCost{
		walBytes:     float64(after.lsn-min(before.lsn, after.lsn)) / items,
		clientMicros: micros(after.client-before.client) / items,
		serverMicros: micros(after.server-before.server) / items,
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// addWindowCost reports c, what each item of a window cost, in figures
// named prefix + "WAL per item" and so on.
func (e *env) addWindowCost(rep *report, w workloadName, prefix string, c windowCost) {
	if e.pool != nil {
		rep.add(w, prefix+"WAL per item", c.walBytes, "bytes", "", nil)
	}
	rep.add(w, prefix+"client CPU per item", c.clientMicros, "µs", "", nil)
	if e.pool == nil {
		return
	}
	if e.serverCPUWhyNot != "" {
		rep.addNotMeasured(w, prefix+"server CPU per item", "µs", e.serverCPUWhyNot)
		return
	}
	rep.add(w, prefix+"server CPU per item", c.serverMicros, "µs", "", nil)
	rep.add(w, prefix+"client + server CPU per item", c.clientMicros+c.serverMicros, "µs", "", nil)
}

// parseLSN turns a pg_lsn's text form, two hexadecimal halves as in
// "16/B374D848", into the byte position it names.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("WAL position %q: no '/'", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// formatLSN is parseLSN's inverse, for passing a position back as a
// pg_lsn.
func formatLSN(p uint64) string { return fmt.Sprintf("%X/%X", p>>32, p&0xFFFFFFFF) }

// processCPU returns this process's user and system CPU so far; 0 where
// getrusage fails.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// findPostmaster returns the PID of the server's postmaster when the
// server runs on this machine, or why its CPU cannot be measured. The
// data directory's postmaster.pid names the postmaster; it is believed
// only if it is the parent of the backend serving this very connection,
// so that a server elsewhere whose PIDs happen to exist here is never
// measured by mistake.
func (e *env) findPostmaster(ctx context.Context) (int, string) {
	dataDir := ""
	if e.cluster != nil {
		dataDir = e.cluster.DataDir()
	} else if err := e.pool.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err != nil {
		return 0, fmt.Sprintf("the server's data directory is not visible to this role (%v)", err)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, "the server is not on this machine (no readable postmaster.pid)"
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pm <= 0 {
		return 0, fmt.Sprintf("postmaster.pid starts with %q, not a PID", first)
	}
	var backend int
	if err := e.pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, err.Error()
	}
	st, err := readProcStat(procRoot, backend)
	if err != nil || st.ppid != pm {
		return 0, "the server is not on this machine (this session's backend is not a child of the postmaster in postmaster.pid)"
	}
	return pm, ""
}

// procStat is what ledgerbench reads of /proc/<pid>/stat: the parent and
// the CPU times, in clock ticks, of the process itself and of its
// children that have ended and been waited for.
type procStat struct {
	ppid     int
	own      uint64 // utime + stime
	children uint64 // cutime + cstime
}

// errProcStat is a /proc/<pid>/stat that does not read as one.
var errProcStat = errors.New("malformed /proc/<pid>/stat")

// parseProcStat reads the contents of a /proc/<pid>/stat file. The
// command name, field 2, is in parentheses and may itself hold spaces and
// parentheses, so the fields are counted from the last ')'.
func parseProcStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errProcStat
	}
	// f[0] is field 3 (state), so field k is f[k-3]: ppid is field 4,
	// utime to cstime are fields 14 to 17.
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return procStat{}, errProcStat
	}
	var n [5]uint64
	for j, k := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseUint(f[k], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("%w: field %d: %v", errProcStat, k+3, err)
		}
		n[j] = v
	}
	return procStat{ppid: int(n[0]), own: n[1] + n[2], children: n[3] + n[4]}, nil
}

// readProcStat reads <root>/<pid>/stat.
func readProcStat(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

// serverCPU returns the CPU used so far by the postmaster pm and its
// children, as the process tree under root (procRoot) shows them: its own, that of the children it has waited for (backends
// that ended), and that of its live children (backends, the checkpointer,
// autovacuum workers). A backend that ends between two readings moves
// from the live to the waited-for share, so the sum stays comparable.
func serverCPU(root string, pm int) (time.Duration, error) {
	st, err := readProcStat(root, pm)
	if err != nil {
		return 0, err
	}
	ticks := st.own + st.children
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0, err
	}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		// A process that ended since the listing has no stat to read;
		// its time is in the postmaster's children share by now.
		if c, err := readProcStat(root, pid); err == nil && c.ppid == pm {
			ticks += c.own
		}
	}
	return ticksToDuration(ticks), nil
}

func ticksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * (time.Second / clockTicks)
}
