package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
)

func TestLinger(t *testing.T) {
	ctx := context.Background()
	if d, caller := ledger.LingerFrom(ctx); d != 0 || caller != nil {
		t.Fatalf("no linger: got %v, %v", d, caller)
	}
	a := ledger.WithLinger(ctx, 5*time.Millisecond)
	b := ledger.WithLinger(ctx, 5*time.Millisecond)
	da, ca := ledger.LingerFrom(a)
	derived, cancel := context.WithCancel(a)
	defer cancel()
	dd, cd := ledger.LingerFrom(derived)
	_, cb := ledger.LingerFrom(b)
	switch {
	case da != 5*time.Millisecond || dd != da:
		t.Fatalf("linger %v, derived %v", da, dd)
	case ca == nil || cd != ca:
		t.Fatal("a context derived from a WithLinger context names the same caller")
	case cb == ca:
		t.Fatal("two WithLinger calls name two callers")
	}
	if d, _ := ledger.LingerFrom(ledger.WithLinger(ctx, -time.Second)); d != 0 {
		t.Fatalf("a negative linger is none: got %v", d)
	}
}
