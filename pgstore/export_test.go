package pgstore

// What the external tests (package pgstore_test) borrow from the internal
// ones: the explain fixture's raw inserts of terminal records.
var (
	InsertTerminalDeliveries = insertTerminalDeliveries
	InsertTerminalEntries    = insertTerminalEntries
)
