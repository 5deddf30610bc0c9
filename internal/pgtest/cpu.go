package pgtest

import "syscall"

// ProcessCPU returns the process's CPU time so far, user and system, in
// nanoseconds (0 if it cannot be read). Benchmarks report its growth per
// item: what the library spends on the client side, which a busy machine
// disturbs less than wall time.
func ProcessCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
