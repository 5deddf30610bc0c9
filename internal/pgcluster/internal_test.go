package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deadPID returns the PID of a process that has already exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	return cmd.Process.Pid
}

func TestSweep(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, files map[string]int) string {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		for f, pid := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(strconv.Itoa(pid)+"\n5432\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dead := deadPID(t)
	staleOwner := mk(dirPrefix+"deadowner", map[string]int{ownerFile: dead})
	stalePM := mk(dirPrefix+"deadpm", map[string]int{"data/postmaster.pid": dead})
	live := mk(dirPrefix+"live", map[string]int{ownerFile: os.Getpid()})
	livePM := mk(dirPrefix+"livepm", map[string]int{ownerFile: dead, "data/postmaster.pid": os.Getpid()})
	fresh := mk(dirPrefix+"nopid", nil)
	old := mk(dirPrefix+"oldnopid", nil)
	past := time.Now().Add(-2 * orphanAge)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	unrelated := mk("someone-else", map[string]int{ownerFile: dead})

	sweep(base, t.Logf)

	for dir, wantGone := range map[string]bool{
		staleOwner: true, stalePM: true, old: true,
		live: false, livePM: false, fresh: false, unrelated: false,
	} {
		_, err := os.Stat(dir)
		if gone := os.IsNotExist(err); gone != wantGone {
			t.Errorf("%s: gone=%v, want %v", filepath.Base(dir), gone, wantGone)
		}
	}
}

func TestVersionOrder(t *testing.T) {
	if !(versionOf("/usr/lib/postgresql/15/bin") > versionOf("/usr/lib/postgresql/9.6/bin")) {
		t.Error("15 should sort above 9.6")
	}
	if versionOf("/usr/pgsql-16/bin") != 16 {
		t.Error("RPM layout not parsed")
	}
}

// TestPortTaken checks that a bind failure is recognized (Start retries on
// it) and that Restart works again once the port is free.
func TestPortTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := Start(ctx, Options{Fast: true, Logf: t.Logf})
	if errors.Is(err, ErrNoServer) && os.Getenv("CI") != "true" && os.Getenv("CI") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port()))
	if err != nil {
		t.Skip("port reused by someone else meanwhile:", err)
	}
	begin := time.Now()
	err = c.Restart(ctx)
	l.Close()
	t.Logf("Restart on taken port after %v: %v", time.Since(begin), err)
	if !errors.Is(err, errBind) {
		t.Fatalf("Restart on a taken port: err = %v, want errBind", err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFindHonoursEnvBinDir: a bin directory named by EnvBinDir is the one
// found, and one that lacks a server binary fails rather than fall back
// to another version.
func TestFindHonoursEnvBinDir(t *testing.T) {
	dir := t.TempDir()
	for _, name := range serverBinaries {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755))
	}
	t.Setenv(EnvBinDir, dir)
	got, err := Find()
	require.NoError(t, err)
	want, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	require.Equal(t, want, got)

	require.NoError(t, os.Remove(filepath.Join(dir, "postgres")))
	_, err = Find()
	require.ErrorIs(t, err, ErrNoServer)
}
