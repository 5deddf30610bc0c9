package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNoServer is returned by Find (and therefore Start) when no complete set of
// PostgreSQL server binaries (initdb, pg_ctl, postgres) can be located.
var ErrNoServer = errors.New("pgcluster: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; " +
	"install the PostgreSQL server binaries, e.g. apt-get install postgresql-15")

// serverBinaries are the programs a usable bin directory must contain. pg_ctl
// is not used by this package but is required so callers (and humans
// debugging a leftover cluster) can rely on it being next to the others.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// EnvBinDir names the environment variable that points Find at one bin
// directory, for running the tests against a given PostgreSQL version
// (`make test/versions` sets it to each version it installs). When set,
// Find uses that directory or fails: it never falls back to another
// version, which would pass a version's run on the wrong server.
const EnvBinDir = "LEDGER_TEST_PG_BIN"

// Find locates a directory holding initdb, pg_ctl and postgres: the one
// EnvBinDir names when it is set; else PATH is tried first, then
// /usr/lib/postgresql/<version>/bin (Debian/Ubuntu layout) and
// /usr/pgsql-<version>/bin (RPM layout), highest version first. The returned
// directory has symlinks resolved, because PATH entries are often symlinks
// into a versioned directory and postgres locates its share files relative
// to its real location.
func Find() (binDir string, err error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if !complete(dir) {
			return "", fmt.Errorf("%w: %s=%s lacks one of %s", ErrNoServer, EnvBinDir, dir, strings.Join(serverBinaries, ", "))
		}
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		return dir, nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && complete(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	var candidates []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	sort.SliceStable(candidates, func(i, j int) bool {
		return versionOf(candidates[i]) > versionOf(candidates[j])
	})
	for _, dir := range candidates {
		if complete(dir) {
			if real, err := filepath.EvalSymlinks(dir); err == nil {
				dir = real
			}
			return dir, nil
		}
	}
	return "", ErrNoServer
}

// complete reports whether dir holds all server binaries as executable files.
func complete(dir string) bool {
	for _, name := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionOf extracts the major version from ".../postgresql/15/bin" or
// "/usr/pgsql-15/bin" so that 15 sorts above 9.6 (a string sort would not).
func versionOf(binDir string) float64 {
	base := filepath.Base(filepath.Dir(binDir))
	base = strings.TrimPrefix(base, "pgsql-")
	v, err := strconv.ParseFloat(base, 64)
	if err != nil {
		return -1
	}
	return v
}
