# prismd build, test and lab entry points. Every target installs what it needs.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
FUZZTIME ?= 10m
FUZZTIME_SHORT ?= 20000x
export GOFLAGS ?= -mod=mod
# Debian packages the tests use: tshark (dissector test), nftables (loss and
# duplication on lab links), iproute2 and ethtool (labs), promtool (metric names).
TEST_PKGS := tshark nftables iproute2 ethtool prometheus iputils-ping
BENCH_PKGS := $(TEST_PKGS) openmpi-bin libopenmpi-dev iperf3

.PHONY: all build deps bench-deps test unit fuzz fuzz-short soak bench demo clean vet

all: build

deps:
	@scripts/apt-ensure.sh $(TEST_PKGS)
	@$(GO) mod download

bench-deps:
	@scripts/apt-ensure.sh $(BENCH_PKGS)

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet ./...

# The whole suite, as CI runs it (as root: the netns tests run, they do not skip).
# -p 1: one package at a time. The lab tests (real prismd processes, real
# timeouts) and the CPU-heavy exact-arithmetic tests otherwise share the 2
# cores, and a starved switch looks like a lossy one; serial, the suite
# still takes well under 20 minutes.
test: deps build vet
	PRISMD_BIN=$(BIN) $(GO) test -p 1 -count=1 -timeout 18m ./...
	@$(MAKE) --no-print-directory fuzz-short

unit:
	$(GO) test -count=1 -short ./...

# Every fuzz target for FUZZTIME each (default 10m).
fuzz:
	scripts/fuzz.sh $(FUZZTIME)

fuzz-short:
	scripts/fuzz.sh $(FUZZTIME_SHORT)

soak: deps build
	PRISMD_BIN=$(BIN) PRISMD_SOAK=1 $(GO) test -count=1 -timeout 0 -run 'Soak' ./...

bench: deps bench-deps build
	PRISMD_BIN=$(BIN) scripts/bench.sh
	PRISMD_BIN=$(BIN) scripts/bench-bitmap.sh

demo: deps build
	$(BIN)/prismctl demo

clean:
	rm -rf $(BIN)

# Plain forwarding: prismd vs a Linux bridge on the same veths, same run (root).
.PHONY: bench-forward
bench-forward: deps build
	PRISMD_BIN=$(BIN) scripts/bench-forward.sh
