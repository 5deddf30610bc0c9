package dispatch_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOptionsAreCheckedByTheCompiler builds small programs against the
// package and requires that a loop given an option that means nothing to
// it does not compile, and that the ways options are meant to be combined
// do. Each program is a package of its own, compiled through an overlay,
// so nothing is written into the tree.
func TestOptionsAreCheckedByTheCompiler(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	goTool, err := exec.LookPath("go")
	require.NoError(t, err)
	const prelude = `package p

import (
	"context"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

var (
	_       = time.Second
	store   = memstore.New()
	emitter = dispatch.EmitterFunc(func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{}, nil
	})
	handler = dispatch.HandlerFunc(func(context.Context, ledger.Delivery) (dispatch.Decision, error) {
		return dispatch.Decision{}, nil
	})
)

func use() {
`
	cases := []struct {
		name     string
		body     string
		compiles bool
	}{
		// A Sweeper takes its own options and the shared ones only.
		{"SweeperRefusesAPollLoopOption", `dispatch.NewSweeper(store, nil, dispatch.WithBatchSize(3))`, false},
		{"SweeperRefusesAWorkerOption", `dispatch.NewSweeper(store, nil, dispatch.WithHandleTimeout(time.Second))`, false},
		{"SweeperRefusesADispatcherOption", `dispatch.NewSweeper(store, nil, dispatch.WithWorker("w"))`, false},
		{"SweeperRefusesASweeperInside", `dispatch.NewSweeper(store, nil, dispatch.WithSweeper())`, false},
		{"WithSweeperRefusesAPollLoopOption", `dispatch.WithSweeper(dispatch.WithPollInterval(time.Second))`, false},
		// A Dispatcher refuses the Worker's and the Sweeper's options.
		{"DispatcherRefusesAWorkerOption", `dispatch.NewDispatcher(store.Outbox(), emitter, dispatch.WithObservation("x"))`, false},
		{"DispatcherRefusesWithoutSweeper", `dispatch.NewDispatcher(store.Outbox(), emitter, dispatch.WithoutSweeper())`, false},
		{"DispatcherRefusesASweeperOption", `dispatch.NewDispatcher(store.Outbox(), emitter, dispatch.WithRetention(time.Hour))`, false},
		// A Worker refuses the Sweeper's options outside WithSweeper.
		{"WorkerRefusesASweeperOption", `dispatch.NewWorker(store, "a", nil, handler, dispatch.WithSweepInterval(time.Minute))`, false},
		{"SweeperTakesItsOwnAndTheSharedOptions", `dispatch.NewSweeper(store, store.Outbox(),
			dispatch.WithClock(time.Now), dispatch.WithAfterFunc(nil), dispatch.WithLogger(nil), dispatch.WithObserver(nil),
			dispatch.WithSweepInterval(time.Minute), dispatch.WithRetention(time.Hour), dispatch.WithPurgeBatchSize(10),
			dispatch.WithHolder("h"), dispatch.WithoutLeadership())`, true},
		{"LoopsTakeASweeper", `dispatch.NewWorker(store, "a", nil, handler,
			dispatch.WithSweeper(dispatch.WithRetention(time.Hour), dispatch.WithLogger(nil)), dispatch.WithoutSweeper())
		dispatch.NewDispatcher(store.Outbox(), emitter, dispatch.WithSweeper(dispatch.WithRetention(time.Hour)))`, true},
		// A Worker refuses the Dispatcher's own options.
		{"WorkerRefusesWithWorker", `dispatch.NewWorker(store, "a", nil, handler, dispatch.WithWorker("w"))`, false},
		{"WorkerRefusesWithEmitTimeout", `dispatch.NewWorker(store, "a", nil, handler, dispatch.WithEmitTimeout(time.Second))`, false},
		{"WorkerRefusesWithPolicy", `dispatch.NewWorker(store, "a", nil, handler, dispatch.WithPolicy(ledger.Policy{}))`, false},
		{"WorkerRefusesWithBatchCompletion", `dispatch.NewWorker(store, "a", nil, handler, dispatch.WithBatchCompletion())`, false},
		{"AListForBothLoopsRefusesADispatcherOption", `_ = []dispatch.LoopOption{dispatch.WithWorker("w")}`, false},
		// One list of options for both loops, as hosts (and benchmark
		// harnesses) build them: every LoopOption is a DispatcherOption
		// and a WorkerOption.
		{"OneListServesBothLoops", `common := []dispatch.LoopOption{
			dispatch.WithBatchSize(1), dispatch.WithConcurrency(1), dispatch.WithPollInterval(time.Second),
			dispatch.WithLogger(nil), dispatch.WithObserver(nil), dispatch.WithShutdownTimeout(time.Second),
			dispatch.WithWake(nil), dispatch.WithClock(time.Now), dispatch.WithLeaseDuration(time.Minute),
			dispatch.WithoutPollJitter(), dispatch.WithSweeper(dispatch.WithRetention(time.Hour)),
		}
		opts := []dispatch.DispatcherOption{dispatch.WithWorker("w"), dispatch.WithEmitTimeout(time.Second),
			dispatch.WithPolicy(ledger.Policy{}), dispatch.WithBatchCompletion()}
		for _, o := range common {
			opts = append(opts, o)
		}
		dispatch.NewDispatcher(store.Outbox(), emitter, opts...)
		wopts := []dispatch.WorkerOption{dispatch.WithObservation("received")}
		for _, o := range common {
			wopts = append(wopts, o)
		}
		dispatch.NewWorker(store, "a", nil, handler, wopts...)`, true},
	}

	root, err := filepath.Abs("..")
	require.NoError(t, err)
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	pkgOf := map[string]string{}
	for i, c := range cases {
		src := filepath.Join(tmp, fmt.Sprintf("c%02d.go", i))
		require.NoError(t, os.WriteFile(src, []byte(prelude+"\t"+c.body+"\n}\n"), 0o644))
		dir := fmt.Sprintf("internal/optioncheck/c%02d", i)
		overlay[filepath.Join(root, dir, "p.go")] = src
		pkgs = append(pkgs, "./"+dir)
		pkgOf[c.name] = "github.com/leaseledger/ledger/" + dir
	}
	spec, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	specPath := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(specPath, spec, 0o644))
	cmd := exec.Command(goTool, append([]string{"build", "-overlay", specPath, "-o", os.DevNull}, pkgs...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "some programs must not compile")
	// The go command prints each failed package's errors under a line
	// naming it.
	failures := map[string]string{}
	for _, part := range strings.Split("\n"+string(out), "\n# ")[1:] {
		pkg, errs, _ := strings.Cut(part, "\n")
		failures[pkg] = errs
	}
	for _, c := range cases {
		errs, failed := failures[pkgOf[c.name]]
		if c.compiles {
			assert.False(t, failed, "%s must compile:\n%s", c.name, errs)
			continue
		}
		if assert.True(t, failed, "%s must not compile", c.name) {
			assert.Contains(t, errs, "does not implement dispatch.", "%s must fail for the option's type:\n%s", c.name, errs)
		}
	}
}
