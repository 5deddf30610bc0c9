package pgstore

import (
	"testing"
	"time"

	"github.com/leaseledger/ledger"
)

// fullDelivery and fullEntry set every nullable column of their rows.
func fullDelivery(id string, at time.Time) ledger.Delivery {
	fence := ledger.Fence(7)
	owner := ledger.Owner{Agent: "agent-" + id, Incarnation: "boot-" + id}
	return ledger.Delivery{
		ID: ledger.DeliveryID(id), Target: "t", EnqueuedTarget: "t0", Ceremony: "c-" + ledger.CeremonyID(id),
		Payload: []byte("{}"), State: ledger.DeliveryStateLeased, Attempts: 2, AvailableAt: at, LeaseSeq: 3,
		Lease:          &ledger.Lease{DeliveryID: ledger.DeliveryID(id), Owner: owner, Token: "tok-" + ledger.Token(id), Seq: 3, GrantedAt: at, ExpiresAt: at.Add(time.Minute)},
		EndedLease:     &ledger.EndedGrant{Token: "old-" + ledger.Token(id), Seq: 2, Op: "release", At: at.Add(-time.Second)},
		Ack:            &ledger.Acknowledgement{Owner: owner, Observation: "seen-" + id, At: at, Deadline: at.Add(time.Hour)},
		Processing:     &ledger.Processing{Action: "act-" + ledger.ActionRef(id), Fence: &fence, At: at},
		Activations:    1,
		LastActivation: &ledger.Activation{Result: ledger.ActivationDelivered, Detail: "detail-" + id}, LastActivationAt: at,
		LastFailure: &ledger.Failure{Kind: ledger.FailureReported, Message: "failed-" + id, Permanent: true, Owner: owner, At: at},
		Cause:       &ledger.Cause{Kind: "expired", Detail: "cause-" + id},
		CreatedAt:   at, UpdatedAt: at, EndedAt: at, Version: 4, RedrivenFrom: "from-" + ledger.DeliveryID(id), RedrivenTo: "to-" + ledger.DeliveryID(id),
	}
}

func fullEntry(id string, at time.Time) ledger.OutboxEntry {
	return ledger.OutboxEntry{
		ID: ledger.OutboxEntryID(id), Envelope: ledger.Envelope{Provider: "p", Kind: "k", Payload: []byte("{}"), IdempotencyKey: "key-" + id},
		Status: ledger.OutboxStatusPending, Attempts: 1, NextAttemptAt: at,
		LastError: &ledger.EmissionError{Code: "500", Message: "boom-" + id}, Result: &ledger.EmissionResult{ProviderRef: "ref-" + id, Detail: "d-" + id},
		DeadLetterReason: "r", ClaimSeq: 2,
		Claim:      &ledger.Claim{EntryID: ledger.OutboxEntryID(id), Worker: "w-" + id, Token: "tok-" + ledger.Token(id), Seq: 2, ClaimedAt: at, ExpiresAt: at.Add(time.Minute)},
		EndedClaim: &ledger.EndedGrant{Token: "old-" + ledger.Token(id), Seq: 1, Op: "release", At: at.Add(-time.Second)},
		CreatedAt:  at, UpdatedAt: at, EndedAt: at, Version: 3, RedrivenFrom: "from-" + ledger.OutboxEntryID(id), RedrivenTo: "to-" + ledger.OutboxEntryID(id),
	}
}

// checkSameColumns fails unless got and want hold the same values.
func checkSameColumns(t *testing.T, what string, got, want []column) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d columns, want %d", what, len(got), len(want))
	}
	for j := range want {
		if !sameValue(got[j].ptr, want[j].ptr) {
			t.Errorf("%s: column %s differs", what, want[j].name)
		}
	}
}

// A reused row keeps its nullable values in cells: filled again and
// again, alternately with a record that sets every nullable column and
// one that sets none, it must read as a row built on its own each time,
// with nothing left over from the record before.
func TestReusedRowsReadAsFreshOnes(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	kd := newDeliveryRecords("s", &queries{})
	ke := newEntryRecords("s", &queries{})
	rd, re := kd.reuse(), ke.reuse()
	for i, id := range []string{"a", "b", "c", "d"} {
		d := fullDelivery(id, at.Add(time.Duration(i)*time.Second))
		e := fullEntry(id, at.Add(time.Duration(i)*time.Second))
		if i%2 == 1 {
			d = ledger.Delivery{ID: d.ID, Target: d.Target, State: ledger.DeliveryStateOffered, CreatedAt: at, UpdatedAt: at, Version: 1}
			e = ledger.OutboxEntry{ID: e.ID, Envelope: e.Envelope, Status: ledger.OutboxStatusPending, CreatedAt: at, UpdatedAt: at, Version: 1}
		}
		want, err := kd.columns(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rd(d)
		if err != nil {
			t.Fatal(err)
		}
		checkSameColumns(t, "delivery "+id, got, want)
		want, err = ke.columns(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err = re(e)
		if err != nil {
			t.Fatal(err)
		}
		checkSameColumns(t, "entry "+id, got, want)
	}
}

// A cell of a kind that is used up falls back to the heap: the value is
// still right, and the cells handed out before keep theirs.
func TestCellsFallBackToTheHeap(t *testing.T) {
	c := new(cells)
	var ps []*string
	for i := range len(c.strs) + 3 {
		ps = append(ps, cell(c, string(rune('a'+i))))
	}
	for i, p := range ps {
		if *p != string(rune('a'+i)) {
			t.Fatalf("cell %d holds %q", i, *p)
		}
	}
	if ps[len(c.strs)] == &c.strs[len(c.strs)-1] {
		t.Fatal("a cell was handed out twice")
	}
	c.reset()
	if p := cell(c, "again"); p != &c.strs[0] {
		t.Fatal("reset did not free the cells")
	}
}
