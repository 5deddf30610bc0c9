package ledgertest_test

// The subtests of TestLedger (below TestBrokenStoreHelper/) that must fail
// against each broken ledger of selftest_broken_test.go.
var (
	ledgerDoubleGrantFailures = []string{
		"Lease/IsExclusive",
		"Concurrency/WorkersRace",
	}
	ledgerForgetAttemptFailures = []string{
		"Lease/GrantCountsAnAttempt",
	}
	ledgerStaleTokenFailures = []string{
		"Acknowledge/WrongTokenIsLeaseLost",
		"Acknowledge/EarlierGrantIsLeaseLost",
		"Release/EarlierGrantIsLeaseLost",
		"MarkFailed/EarlierGrantIsLeaseLost",
	}
)
