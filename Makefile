# fleetlet — build, test and try it on a local sandbox of real clusters.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
export GOTOOLCHAIN := local

BIN := $(CURDIR)/bin
SANDBOX_DIR ?= $(CURDIR)/.sandbox
# A hung test fails fast instead of eating CI's time.
TEST_TIMEOUT ?= 30m
GOLANGCI_LINT_VERSION ?= v2.15.0

.PHONY: all build cluster-bins fleetlet-bins test e2e bench unit lint demo demo-down generate verify diagrams clean help

all: build

help: ## Show the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: cluster-bins fleetlet-bins ## Build every binary into bin/ (the first build compiles Kubernetes: about 10 minutes on 2 cores).

cluster-bins: $(BIN)/.cluster-bins ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and helm from Go modules.

# Rebuilt only when the pinned modules or the script change: a second run
# takes no time.
$(BIN)/.cluster-bins: go.mod go.sum hack/build-cluster-bins.sh
	BIN=$(BIN) hack/build-cluster-bins.sh
	touch $@

fleetlet-bins: ## Build fleetlet's own commands.
	go build -o $(BIN)/ ./cmd/...

test: build ## Run unit and integration tests, then the e2e suite alone, against real control planes.
	BIN=$(BIN) TEST_TIMEOUT=$(TEST_TIMEOUT) hack/test.sh

e2e: build ## Run the end-to-end suite only (a 3-cluster fleetlet sandbox).
	FLEETLET_BIN_DIR=$(BIN) go test -count=1 -timeout $(TEST_TIMEOUT) -v ./e2e/...

bench: build ## Benchmark 1,000 pods through fleetlet against the same pods created directly in the targets.
	go run ./hack/bench --bin-dir $(BIN) --pods $${PODS:-1000}

unit: ## Run the unit tests only (no binaries needed).
	go test -short -count=1 -timeout 5m ./...

lint: ## gofmt, go vet and golangci-lint.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(BIN)/golangci-lint run ./...

generate: ## Regenerate deepcopy functions and CRDs from the API types.
	hack/generate.sh

verify: ## Fail when generated files are stale or code is not gofmt-clean.
	hack/verify-generate.sh
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi

diagrams: ## Regenerate docs/diagrams/*.svg from their Graphviz sources (needs dot: apt-get install graphviz).
	@for f in docs/diagrams/*.dot; do dot -Tsvg "$$f" -o "$${f%.dot}.svg" && echo "$${f%.dot}.svg"; done

demo: build ## Start a 3-cluster sandbox in .sandbox and run a pod in each cluster.
	$(BIN)/fleetlet-sandbox demo --dir $(SANDBOX_DIR)

demo-down: ## Stop the demo sandbox.
	$(BIN)/fleetlet-sandbox down --dir $(SANDBOX_DIR)

clean: ## Remove bin/ and the demo sandbox (stopping it first).
	-[ -x $(BIN)/fleetlet-sandbox ] && [ -f $(SANDBOX_DIR)/sandbox.json ] && $(BIN)/fleetlet-sandbox down --dir $(SANDBOX_DIR)
	rm -rf $(BIN) $(SANDBOX_DIR)
