package storekit

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated tables in docs/state-machines.md")

// TestStateMachineDocs keeps the state x operation tables in
// docs/state-machines.md equal to what the state machine does: they are
// computed here from the pure functions, so the drawing cannot drift from
// the code. Run with -update after changing a transition.
func TestStateMachineDocs(t *testing.T) {
	const path = "../docs/state-machines.md"
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	got := string(doc)
	got = replaceBetween(t, got, "<!-- delivery-table -->", deliveryTable(t))
	got = replaceBetween(t, got, "<!-- outbox-table -->", outboxTable(t))
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	require.Equal(t, string(doc), got, "docs/state-machines.md is stale: run go test -run TestStateMachineDocs -update ./storekit")
}

func replaceBetween(t *testing.T, doc, marker, table string) string {
	t.Helper()
	parts := strings.Split(doc, marker)
	require.Len(t, parts, 3, "marker %s must appear twice", marker)
	return parts[0] + marker + "\n" + table + marker + parts[2]
}

func cell(o ledger.Outcome, before, after string) string {
	if o != ledger.OutcomeApplied || before == after {
		return string(o)
	}
	return fmt.Sprintf("%s → %s", o, after)
}

func deliveryTable(t *testing.T) string {
	all, lease := fixtures(t)
	late := t0.Add(1000 * time.Hour)
	now := t0.Add(30 * time.Second)
	cols := []struct {
		name string
		run  func(d ledger.Delivery) string
	}{
		{"Lease", func(d ledger.Delivery) string {
			if !Delivery(d).Offerable(late) {
				return "not offered"
			}
			g, _ := Delivery(d).Grant(ownerB, "t", late, time.Minute)
			return cell(ledger.OutcomeApplied, "", string(g.State))
		}},
		{"Acknowledge", func(d ledger.Delivery) string {
			g, o := Delivery(d).Acknowledge(lease, "", now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"MarkProcessed", func(d ledger.Delivery) string {
			g, o := Delivery(d).MarkProcessed(ownerA, nil, nil, "act-1", now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"RecordActivation", func(d ledger.Delivery) string {
			g, o := Delivery(d).RecordActivation(ledger.Activation{Result: ledger.ActivationDelivered}, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"MarkFailed", func(d ledger.Delivery) string {
			g, o := Delivery(d).MarkFailed(lease, ledger.FailureReason{}, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"Release", func(d ledger.Delivery) string {
			g, o := Delivery(d).Release(lease, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"RenewLease", func(d ledger.Delivery) string {
			g, o := Delivery(d).Renew(lease, now, time.Minute)
			return cell(o, string(d.State), string(g.State))
		}},
		{"Expire (after deadlines)", func(d ledger.Delivery) string {
			g, changed := Delivery(d).Expire(late)
			if !changed {
				return "unchanged"
			}
			return "→ " + string(g.State)
		}},
		{"Abandon", func(d ledger.Delivery) string {
			g, o := Delivery(d).Abandon(ledger.Cause{Kind: ledger.CauseQueueBounded}, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"Supersede Follow", func(d ledger.Delivery) string {
			g, changed := Delivery(d).Supersede("host-2", ledger.Follow, now)
			if !changed {
				return "unchanged"
			}
			return "moved → " + string(g.State)
		}},
		{"Supersede LeaveBehind", func(d ledger.Delivery) string {
			g, changed := Delivery(d).Supersede("host-2", ledger.LeaveBehind, now)
			if !changed {
				return "unchanged"
			}
			return "→ " + string(g.State)
		}},
		{"Redrive", func(d ledger.Delivery) string {
			_, fresh, o := Delivery(d).Redrive("", false, now)
			if o != ledger.OutcomeApplied {
				return string(o)
			}
			return "applied, new " + string(fresh.State)
		}},
	}
	var b strings.Builder
	b.WriteString("| state |")
	for _, c := range cols {
		b.WriteString(" " + c.name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, s := range ledger.DeliveryStates() {
		b.WriteString("| " + string(s) + " |")
		for _, c := range cols {
			b.WriteString(" " + c.run(all[s]) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func outboxTable(t *testing.T) string {
	t.Helper()
	retry := t0.Add(time.Hour)
	var b strings.Builder
	cols := []string{"Claim", "MarkClaimDelivered", "MarkClaimFailed (retry)", "MarkClaimFailed (nil)", "MarkClaimDeadLettered", "ReleaseClaim", "SaveClaim (deferred)", "Redrive"}
	b.WriteString("| status |")
	for _, c := range cols {
		b.WriteString(" " + c + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, s := range ledger.OutboxStatuses() {
		e := newEntry()
		if s != ledger.OutboxStatusPending {
			in := e
			in.Status = s
			in.NextAttemptAt = t0
			e = OutboxEntry(e).apply(in, ledger.OpSave, t0)
		}
		claimable := OutboxEntry(e).PendingClaimable(retry) || OutboxEntry(e).RetryClaimable(retry)
		claimed, claim := OutboxEntry(e).Grant("w1", "tok", t0, time.Minute)
		if !claimable {
			claimed, claim = e, ledger.Claim{EntryID: e.ID, Token: "tok", Seq: 1}
		}
		row := []string{"not claimable"}
		if claimable {
			row[0] = "claimed"
		}
		deferred := claimed
		deferred.Status, deferred.NextAttemptAt = ledger.OutboxStatusDeferred, retry
		for _, r := range []func() (ledger.OutboxEntry, ledger.Outcome){
			func() (ledger.OutboxEntry, ledger.Outcome) {
				return OutboxEntry(claimed).MarkClaimDelivered(claim, ledger.EmissionResult{}, t0)
			},
			func() (ledger.OutboxEntry, ledger.Outcome) {
				return OutboxEntry(claimed).MarkClaimFailed(claim, ledger.EmissionError{}, &retry, t0)
			},
			func() (ledger.OutboxEntry, ledger.Outcome) {
				return OutboxEntry(claimed).MarkClaimFailed(claim, ledger.EmissionError{}, nil, t0)
			},
			func() (ledger.OutboxEntry, ledger.Outcome) {
				return OutboxEntry(claimed).MarkClaimDeadLettered(claim, ledger.EmissionError{}, "", t0)
			},
			func() (ledger.OutboxEntry, ledger.Outcome) { return OutboxEntry(claimed).ReleaseClaim(claim, t0) },
			func() (ledger.OutboxEntry, ledger.Outcome) {
				return OutboxEntry(claimed).SaveClaim(claim, deferred, t0)
			},
		} {
			g, o := r()
			row = append(row, cell(o, "", string(g.Status)))
		}
		if _, fresh, o := OutboxEntry(e).Redrive("", false, t0); o == ledger.OutcomeApplied {
			row = append(row, "applied, new "+string(fresh.Status))
		} else {
			row = append(row, string(o))
		}
		b.WriteString("| " + string(s) + " | " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}
