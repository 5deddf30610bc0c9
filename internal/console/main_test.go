package console

import (
	"testing"

	"github.com/leaseledger/ledger/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
