package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChaosChild is the worker process of TestChaosPG: the parent runs the
// test binary again with only this test and a childConfig in childEnv.
// It works like a goroutine worker, on the same database and the same
// shared clock and counters, but logs to a file, synced per line, since
// the parent kills it with SIGKILL in the middle of a call.
func TestChaosChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("the worker process of TestChaosPG; runs only when that test starts it")
	}
	var cfg childConfig
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	setting, ok := pgSettingNamed(cfg.Setting)
	require.True(t, ok, "unknown pgstore setting %q", cfg.Setting)

	sh, err := mapShared(cfg.SharedPath)
	require.NoError(t, err)
	defer func() { require.NoError(t, sh.unmap()) }()
	sink, err := newFileSink(cfg.LogPath)
	require.NoError(t, err)
	defer sink.Close()
	notify := os.NewFile(3, "notify")
	require.NotNil(t, notify, "the parent passes a pipe as descriptor 3")
	defer notify.Close()

	name := fmt.Sprintf("child-%d", cfg.Incarnation)
	w := &worker{
		name:     name,
		agent:    "child",
		inc:      cfg.Incarnation - 1,
		rng:      rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Incarnation))),
		p:        cfg.Params,
		sh:       sh,
		sink:     sink,
		faults:   newFaultCounts(),
		problems: &problemLog{},
		// The parent counts these bytes to pick the moment of the kill.
		onInvoke: func() { _, _ = notify.Write([]byte{'.'}) },
	}
	w.incarnate()
	ctx := t.Context()
	main, pool, err := pgBackend(ctx, cfg.DSN, cfg.Schema, "chaos-"+name, false, w.stamp, setting)
	require.NoError(t, err)
	defer pool.Close()
	tiny, tinyPool, err := pgBackend(ctx, cfg.DSN, cfg.Schema, "chaos-"+name+"-tiny", true, w.stamp, setting)
	require.NoError(t, err)
	defer tinyPool.Close()
	w.main, w.tiny = main, &tiny

	w.run(ctx)
	require.Empty(t, w.problems.all())
}
