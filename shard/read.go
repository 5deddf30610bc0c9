package shard

import (
	"context"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// List asks every shard for the page after the same cursor, concurrently,
// and merges the answers in ID order. The cursor is the store's own
// (storekit.EncodeCursor of the last ID returned), which every shard reads
// the same way, so paging is as stable as on one store: a record appears
// once, and one inserted while paging appears later when its ID sorts
// after the cursor. A page costs one call per shard, each for up to
// q.Limit records. It needs every shard: one that fails fails the call.
func (l *Ledger) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return ledger.Page{}, err
	}
	if _, err := storekit.ValidateList(q); err != nil {
		return ledger.Page{}, err
	}
	st := l.state.Load()
	pages, errs := gather(ctx, st.every(), func(ctx context.Context, i int) (ledger.Page, error) {
		return st.shards[i].List(ctx, q)
	})
	if err := all(errs); err != nil {
		return ledger.Page{}, err
	}
	var merged []ledger.Delivery
	more := false
	for _, p := range pages {
		merged = append(merged, p.Deliveries...)
		more = more || p.Next != ""
	}
	slices.SortFunc(merged, func(a, b ledger.Delivery) int { return compareStrings(string(a.ID), string(b.ID)) })
	if len(merged) > q.Limit {
		merged, more = merged[:q.Limit], true
	}
	page := ledger.Page{Deliveries: merged}
	if more && len(merged) > 0 {
		page.Next = storekit.EncodeCursor(merged[len(merged)-1].ID)
	}
	if page.Deliveries == nil {
		page.Deliveries = []ledger.Delivery{}
	}
	return page, nil
}

// compareStrings orders by bytes, as the stores' ID order does.
func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Stats adds up every shard's statistics: counts add, the oldest
// offerable time is the earliest, and each target's queue, which lives on
// one shard, comes out as that shard counted it. It needs every shard.
func (l *Ledger) Stats(ctx context.Context, filter ledger.StatsFilter, now time.Time) (ledger.DeliveryStats, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return ledger.DeliveryStats{}, err
	}
	if err := storekit.ValidateStats(filter, now); err != nil {
		return ledger.DeliveryStats{}, err
	}
	st := l.state.Load()
	parts, errs := gather(ctx, st.every(), func(ctx context.Context, i int) (ledger.DeliveryStats, error) {
		r, err := capability[ledger.StatsReporter](st.shards[i], "ledger", "report statistics")
		if err != nil {
			return ledger.DeliveryStats{}, err
		}
		return r.Stats(ctx, filter, now)
	})
	if err := all(errs); err != nil {
		return ledger.DeliveryStats{}, err
	}
	out := storekit.NewDeliveryStats()
	for _, p := range parts {
		for s, n := range p.ByState {
			out.ByState[s] += n
		}
		for c, n := range p.ByCause {
			out.ByCause[c] += n
		}
		for t, q := range p.ByTarget {
			storekit.AddDeliveryQueue(&out, t, q.Depth, q.OldestAvailableAt)
		}
	}
	storekit.FinishDeliveryStats(&out, now)
	return out, nil
}

// TakeLead, RenewLead, ReleaseLead and GetLead keep leads on shard 0
// alone: a lead names one holder for the whole ledger, and one shard
// serialises it. While shard 0 is down no lead can be taken, so
// dispatch.Sweeper pauses (its sweeps span every shard anyway).
func (l *Ledger) TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	e, err := l.elector()
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return e.TakeLead(ctx, name, holder, now, ttl)
}

// RenewLead renews a lead on shard 0 (see TakeLead).
func (l *Ledger) RenewLead(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	e, err := l.elector()
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return e.RenewLead(ctx, lead, now, ttl)
}

// ReleaseLead releases a lead on shard 0 (see TakeLead).
func (l *Ledger) ReleaseLead(ctx context.Context, lead ledger.Lead, now time.Time) (ledger.LeadResult, error) {
	e, err := l.elector()
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return e.ReleaseLead(ctx, lead, now)
}

// GetLead reads a lead from shard 0 (see TakeLead).
func (l *Ledger) GetLead(ctx context.Context, name string) (ledger.Lead, error) {
	e, err := l.elector()
	if err != nil {
		return ledger.Lead{}, err
	}
	return e.GetLead(ctx, name)
}

func (l *Ledger) elector() (ledger.Elector, error) {
	return electorOf(l.state.Load().shards[0])
}

func electorOf(s any) (ledger.Elector, error) {
	e, ok := s.(ledger.Elector)
	if !ok {
		return nil, &ledger.InvalidError{Field: "ledger", Reason: "shard 0 keeps no leads"}
	}
	return e, nil
}
