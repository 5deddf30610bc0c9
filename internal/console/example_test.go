package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/console"
	"github.com/leaseledger/ledger/memstore"
)

// A read-only console over an in-memory ledger, served by httptest; a
// command serves it with console.Listen and console.Serve instead.
func ExampleNew() {
	store := memstore.New()
	now := time.Date(2030, time.January, 1, 9, 0, 0, 0, time.UTC)
	_, _ = store.Enqueue(context.Background(), ledger.EnqueueRequest{ID: "order-42", Target: "host-1", Payload: []byte("ship it")}, now)

	h, err := console.New(store, store.Outbox(), console.Options{Title: "example", Now: func() time.Time { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/delivery?id=order-42")
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("Content-Security-Policy") != "")
	// Output: 200 true
}
