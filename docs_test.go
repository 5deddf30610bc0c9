package ledger

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated tables in docs/state-machines.md")

// TestStateMachineDocs keeps the state x operation tables in
// docs/state-machines.md equal to what the state machine does: they are
// computed here from the pure functions, so the drawing cannot drift from
// the code. Run with -update after changing a transition.
func TestStateMachineDocs(t *testing.T) {
	const path = "docs/state-machines.md"
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	got := string(doc)
	got = replaceBetween(t, got, "<!-- delivery-table -->", deliveryTable(t))
	got = replaceBetween(t, got, "<!-- outbox-table -->", outboxTable(t))
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	require.Equal(t, string(doc), got, "docs/state-machines.md is stale: run go test -run TestStateMachineDocs -update .")
}

func replaceBetween(t *testing.T, doc, marker, table string) string {
	t.Helper()
	parts := strings.Split(doc, marker)
	require.Len(t, parts, 3, "marker %s must appear twice", marker)
	return parts[0] + marker + "\n" + table + marker + parts[2]
}

func cell(o Outcome, before, after string) string {
	if o != OutcomeApplied || before == after {
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
		run  func(d Delivery) string
	}{
		{"Lease", func(d Delivery) string {
			if !d.Offerable(late) {
				return "not offered"
			}
			g, _ := d.Grant(ownerB, "t", late, time.Minute)
			return cell(OutcomeApplied, "", string(g.State))
		}},
		{"Acknowledge", func(d Delivery) string {
			g, o := d.Acknowledge(lease, "", now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"MarkProcessed", func(d Delivery) string {
			g, o := d.MarkProcessed(ownerA, nil, nil, "act-1", now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"RecordActivation", func(d Delivery) string {
			g, o := d.RecordActivation(Activation{Result: ActivationDelivered}, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"MarkFailed", func(d Delivery) string {
			g, o := d.MarkFailed(lease, FailureReason{}, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"Release", func(d Delivery) string {
			g, o := d.Release(lease, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"RenewLease", func(d Delivery) string {
			g, o := d.Renew(lease, now, time.Minute)
			return cell(o, string(d.State), string(g.State))
		}},
		{"Expire (after deadlines)", func(d Delivery) string {
			g, changed := d.Expire(late)
			if !changed {
				return "unchanged"
			}
			return "→ " + string(g.State)
		}},
		{"Abandon", func(d Delivery) string {
			g, o := d.Abandon(Cause{Kind: CauseQueueBounded}, now)
			return cell(o, string(d.State), string(g.State))
		}},
		{"Supersede Follow", func(d Delivery) string {
			g, changed := d.Supersede("host-2", Follow, now)
			if !changed {
				return "unchanged"
			}
			return "moved → " + string(g.State)
		}},
		{"Supersede LeaveBehind", func(d Delivery) string {
			g, changed := d.Supersede("host-2", LeaveBehind, now)
			if !changed {
				return "unchanged"
			}
			return "→ " + string(g.State)
		}},
		{"Redrive", func(d Delivery) string {
			_, fresh, o := d.Redrive("", false, now)
			if o != OutcomeApplied {
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
	for _, s := range DeliveryStates() {
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
	for _, s := range OutboxStatuses() {
		e := newEntry()
		if s != OutboxStatusPending {
			in := e
			in.Status = s
			in.NextAttemptAt = t0
			e = e.apply(in, OpSave, t0)
		}
		claimable := e.PendingClaimable(retry) || e.RetryClaimable(retry)
		claimed, claim := e.Grant("w1", "tok", t0, time.Minute)
		if !claimable {
			claimed, claim = e, Claim{EntryID: e.ID, Token: "tok", Seq: 1}
		}
		row := []string{"not claimable"}
		if claimable {
			row[0] = "claimed"
		}
		deferred := claimed
		deferred.Status, deferred.NextAttemptAt = OutboxStatusDeferred, retry
		for _, r := range []func() (OutboxEntry, Outcome){
			func() (OutboxEntry, Outcome) { return claimed.MarkClaimDelivered(claim, EmissionResult{}, t0) },
			func() (OutboxEntry, Outcome) { return claimed.MarkClaimFailed(claim, EmissionError{}, &retry, t0) },
			func() (OutboxEntry, Outcome) { return claimed.MarkClaimFailed(claim, EmissionError{}, nil, t0) },
			func() (OutboxEntry, Outcome) { return claimed.MarkClaimDeadLettered(claim, EmissionError{}, "", t0) },
			func() (OutboxEntry, Outcome) { return claimed.ReleaseClaim(claim, t0) },
			func() (OutboxEntry, Outcome) { return claimed.SaveClaim(claim, deferred, t0) },
		} {
			g, o := r()
			row = append(row, cell(o, "", string(g.Status)))
		}
		if _, fresh, o := e.Redrive("", false, t0); o == OutcomeApplied {
			row = append(row, "applied, new "+string(fresh.Status))
		} else {
			row = append(row, string(o))
		}
		b.WriteString("| " + string(s) + " | " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}
