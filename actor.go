package ledger

import "context"

// actorKey is the context key of WithActor.
type actorKey struct{}

// WithActor returns a copy of ctx that names actor as who makes the calls
// made with it, for the history of the calls that otherwise act for
// nobody in particular: Abandon, ExpireCeremony, Redrive,
// RedriveMatching, RedriveEntry and RedriveEntriesMatching record it as
// their Transition.Actor. Operators' tools set it (ledgerctl to the
// operating-system user and the tool, the console to its login), so
// that the history says which person ended or redrove an item. Calls
// made under a lease or a claim keep recording its owner or worker.
//
// actor follows the rule of names (1 to 255 bytes of valid UTF-8, no
// control or invisible characters); WithActor returns ctx unchanged and
// an error matching ErrInvalid for one that breaks it, so a store never
// meets an actor it could not record.
func WithActor(ctx context.Context, actor string) (context.Context, error) {
	if err := validateName("actor", actor); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, actorKey{}, actor), nil
}

// ActorFrom returns the actor WithActor put in ctx, or "" when none.
// Stores call it for the history of the calls WithActor lists.
func ActorFrom(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}
