package storekit

import (
	"github.com/leaseledger/ledger"
)

// Delivery is a ledger.Delivery as the state machine sees it: convert a
// record, apply one transition, store what comes back.
//
//	next, lease := storekit.Delivery(d).Grant(owner, token, now, duration)
//
// Its methods never change their receiver's caller-visible state: each
// returns the new record as a ledger.Delivery, or the record unchanged
// when the call does not apply.
type Delivery ledger.Delivery

// OutboxEntry is a ledger.OutboxEntry as the state machine sees it, as
// Delivery is for deliveries.
type OutboxEntry ledger.OutboxEntry

// Lead is a ledger.Lead as the state machine of leads sees it: the row
// a store holds for one name, its zero value for a name never taken.
type Lead ledger.Lead
