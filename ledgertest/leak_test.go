package ledgertest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the test binary when a goroutine started by a test (or by
// the package under test) is still running after every test finished:
// stores must not leave workers behind, and tests must wait for their own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
