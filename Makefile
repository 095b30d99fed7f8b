# omniserve build. The CPU flags matter 2-6x for llama.cpp (see docs/BUILDING.md); every target
# that compiles Go uses the same flags so the build cache is shared between build, test and bench.
SHELL := /bin/bash
GO ?= go
# Every target builds and tests with this Go release, which the go command fetches once from
# the module proxy (golang.org/toolchain) when the machine's Go is older: the machines' 1.26.8
# lacks the net/http, crypto/tls and html/template security fixes of 1.26.9/1.26.10 that
# `make vulncheck` reports (docs/SECURITY.md). go.mod still accepts 1.26 for plain go commands.
GO_TOOLCHAIN ?= go1.27.3
export GOTOOLCHAIN := $(GO_TOOLCHAIN)
BIN := bin/omniserve
# BUILD_INCLUDE may be set from the environment so that several checkouts share one cgo build cache.
BUILD_INCLUDE ?= $(CURDIR)/.build/include
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/omniserve/omniserve/internal/api.Version=$(VERSION) -X github.com/omniserve/omniserve/internal/api.Commit=$(COMMIT)

export CGO_ENABLED := 1
export CGO_CFLAGS := -O3 -march=x86-64-v3
export CGO_CXXFLAGS := -O3 -march=x86-64-v3
export CGO_CPPFLAGS := -I$(BUILD_INCLUDE)
export GOFLAGS := -mod=mod

.PHONY: all deps headers build run test test-soak test-short lint vulncheck bench bench-engine bench-speech bench-chat bench-pipeline bench-realtime bench-latency bench-conversations bench-soak bench-long cuda clean

all: build

deps:
	./scripts/install-deps.sh

headers:
	@./scripts/cgo-headers.sh >/dev/null

build: headers
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/omniserve

run: deps build
	./$(BIN) serve

# test includes test/, whose end-to-end tests drive the bin/omniserve built here, then the load
# tests of test-soak (which a plain `go test ./...` skips).
test: deps build
	$(GO) test -race -count=1 -timeout 40m ./...
	$(MAKE) --no-print-directory test-soak

# test-soak: load tests on bin/omniserve (test/soak_test.go): 200 abrupt disconnects mid-response,
# then a 6-minute soak at 8 sessions (SOAK_DURATION) reporting turns, errors and the RSS slope.
SOAK_DURATION ?= 6m
test-soak: build
	OMNISERVE_SOAK=1 OMNISERVE_SOAK_DURATION=$(SOAK_DURATION) \
	  $(GO) test -count=1 -timeout 20m -parallel 16 -v -run '^(TestDisconnectStorm|TestSoak)$$' ./test/

test-short: headers
	$(GO) test -race -short -count=1 ./...

# lint: gofmt, go vet and staticcheck (installed into .build/bin at a pinned version). vulncheck
# runs govulncheck against a local copy of the Go vulnerability database, built by
# scripts/vulndb.sh from golang.org/x/vulndb at VULNDB_VERSION (fetched through the module
# proxy: vuln.go.dev itself is unreachable from the build machines). Bump VULNDB_VERSION to
# refresh it; the database is as fresh as that version's date.
STATICCHECK_VERSION := v0.8.2
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
VULNDB := $(CURDIR)/.build/vulndb-$(VULNDB_VERSION)
GOVULNCHECK_VERSION := v1.9.0
# Per toolchain: an analyzer must be built with a Go at least as new as the code it reads.
TOOLS_BIN := $(CURDIR)/.build/bin/$(GO_TOOLCHAIN)

$(TOOLS_BIN)/staticcheck:
	GOBIN=$(TOOLS_BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(TOOLS_BIN)/govulncheck:
	GOBIN=$(TOOLS_BIN) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

lint: headers $(TOOLS_BIN)/staticcheck
	@out=$$(gofmt -l cmd internal test configs); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS_BIN)/staticcheck ./...

$(VULNDB)/index/db.json:
	./scripts/vulndb.sh $(VULNDB_VERSION) $(VULNDB)

vulncheck: headers $(TOOLS_BIN)/govulncheck $(VULNDB)/index/db.json
	./scripts/vulncheck.sh $(TOOLS_BIN)/govulncheck $(VULNDB) scripts/vulncheck-accepted.txt

# bench runs every benchmark. Each bench-* target is an alias of `omniserve bench <name>` on the
# bin/omniserve built here, so the benchmarks measure the server users run (docs/BENCHMARKS.md).
# BENCH_<NAME>_FLAGS add flags, e.g. make bench-latency BENCH_LATENCY_FLAGS="--runs 5".
BENCH_TARGETS ?= bench-engine bench-speech bench-chat bench-realtime bench-latency bench-conversations
bench: build
	@for t in $(BENCH_TARGETS); do $(MAKE) --no-print-directory $$t || exit 1; done

# bench-speech: the speech front end, then the pipeline's endpoint-to-first-audio latency.
BENCH_SPEECH_FLAGS ?=
bench-speech: build
	./$(BIN) bench speech $(BENCH_SPEECH_FLAGS)

# bench-pipeline: the pipeline part of bench-speech alone.
BENCH_PIPELINE_FLAGS ?=
bench-pipeline: build
	./$(BIN) bench speech --part pipeline $(BENCH_PIPELINE_FLAGS)

BENCH_CHAT_FLAGS ?=
bench-chat: build
	./$(BIN) bench chat $(BENCH_CHAT_FLAGS)

BENCH_REALTIME_FLAGS ?=
bench-realtime: build
	./$(BIN) bench realtime $(BENCH_REALTIME_FLAGS)

# bench-latency: an independent client against bin/omniserve serve, started as a child process,
# timing what a user hears (docs/BENCHMARKS.md "Latency as heard").
BENCH_LATENCY_FLAGS ?=
bench-latency: build
	./$(BIN) bench latency $(BENCH_LATENCY_FLAGS)

# bench-conversations: steps of N real-time conversations at once against bin/omniserve serve
# until one does not keep up (docs/BENCHMARKS.md "Conversations at once"); e.g.
# BENCH_CONVERSATIONS_FLAGS="--dialect live".
BENCH_CONVERSATIONS_FLAGS ?=
bench-conversations: build
	./$(BIN) bench conversations $(BENCH_CONVERSATIONS_FLAGS)

# bench-soak: the wall-clock soak of issue 41, opt-in (it takes SOAK_CONVERSATIONS_TIME): 8
# conversations at real time against bin/omniserve serve (a child process), reported by
# 10-minute windows: each window's latency and the server's RSS, the last window's p99 over
# the first's. Not in `make test`.
SOAK_CONVERSATIONS_TIME ?= 60m
BENCH_SOAK_FLAGS ?=
bench-soak: build
	./$(BIN) bench conversations --steps 8 --step-time $(SOAK_CONVERSATIONS_TIME) --window 10m $(BENCH_SOAK_FLAGS)

# bench-long: one realtime session of 500 turns against bin/omniserve serve (a child process):
# the last turns' latency against the first ones', and the server's RSS growth. Not in
# BENCH_TARGETS: it takes about half an hour.
bench-long: build
	./$(BIN) bench long $(BENCH_LONG_FLAGS)

# bench-engine: dummy:0.6b on CPU with 2 threads (docs/BENCHMARKS.md "Engine"); bin/omniserve
# finds a CUDA backend in lib/ollama (BENCH_ENGINE_FLAGS="--device cuda" on a GPU).
BENCH_ENGINE_FLAGS ?= --device cpu --threads 2
bench-engine: build
	./$(BIN) bench engine $(BENCH_ENGINE_FLAGS)

cuda: headers
	./scripts/build-cuda.sh

clean:
	rm -rf bin lib .build
