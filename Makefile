# fleetlet — build, test and try it on a local sandbox of real clusters.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
export GOTOOLCHAIN := local
# One build configuration for every Go command the Makefile runs (binaries,
# tests, vet, lint): static (no cgo) and with trimmed paths, as fleetlet's
# image is built. The Go build cache then holds one compile of the
# Kubernetes packages every binary and test shares; with the defaults
# (cgo on, full paths) beside fleetlet's own flags, a cold CI compiled
# them two or three times.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

BIN := $(CURDIR)/bin
# This checkout's version and commit (hack/version.sh), stamped into every
# binary, the chart and the image.
VERSION_INFO := $(shell hack/version.sh)
VERSION ?= $(word 1,$(VERSION_INFO))
COMMIT ?= $(word 2,$(VERSION_INFO))
LDFLAGS := -X github.com/fleetlet/fleetlet/pkg/version.version=$(VERSION) -X github.com/fleetlet/fleetlet/pkg/version.commit=$(COMMIT)
# The image `make image` tags, and the chart's default image.repository.
IMAGE_REPOSITORY ?= ghcr.io/fleetlet/fleetlet
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
SANDBOX_DIR ?= $(CURDIR)/.sandbox
# A hung test fails fast instead of eating CI's time.
TEST_TIMEOUT ?= 30m
GOLANGCI_LINT_VERSION ?= v2.15.0
# The earlier release the e2e suite upgrades from (e2e/upgrade_test.go): the
# last commit of main before the real-cluster work, built into UPGRADE_DIR.
UPGRADE_FROM ?= 7162b030241ae95bc372699a215250604c8aee59
UPGRADE_DIR := $(BIN)/upgrade-from

.PHONY: all build cluster-bins kueue metrics-server fleetlet-bins chart upgrade-from conformance-bins conformance image image-push version test e2e bench unit lint demo demo-down generate verify diagrams clean help

# `make` alone prints the help.
.DEFAULT_GOAL := help

help: ## Show the targets (start with `make demo`, then `make test`).
	@echo "fleetlet $(VERSION). Start with these two:"
	@echo "  make demo       build, start a local 3-cluster sandbox and run a pod in each cluster"
	@echo "  make test       unit and integration tests, then the e2e suite, against real control planes"
	@echo
	@echo "Every target:"
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

all: build ## The same as build.

build: cluster-bins fleetlet-bins chart ## Build every binary into bin/ and package the chart (the first build compiles Kubernetes: about 7 minutes on 2 cores).

cluster-bins: $(BIN)/.cluster-bins ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and helm from Go modules.

# Rebuilt only when the pinned modules or the script change: a second run
# takes no time.
$(BIN)/.cluster-bins: go.mod go.sum hack/build-cluster-bins.sh
	BIN=$(BIN) hack/build-cluster-bins.sh
	touch $@

# fleetlet's commands are static (no cgo) and built as the image's are, so
# that the image's linux/amd64 binary costs a link: the tests run the code the
# image ships.
FLEETLET_BUILD := env CGO_ENABLED=0 go build -trimpath

fleetlet-bins: ## Build fleetlet's own commands, stamped with the version.
	@hack/step.sh "building fleetlet's commands ($(VERSION))" $(FLEETLET_BUILD) -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

kueue: $(BIN)/.kueue ## Build the Kueue manager (and copy its CRDs and webhooks) from its own tools module, hack/kueue: the e2e suite runs it in the sandbox's source.

$(BIN)/.kueue: hack/kueue/go.mod hack/kueue/go.sum hack/build-kueue.sh
	BIN=$(BIN) hack/build-kueue.sh
	touch $@

metrics-server: $(BIN)/.metrics-server ## Build metrics-server v0.8.0 from its own tools module, hack/metrics-server: the e2e suite runs it in every sandbox cluster.

$(BIN)/.metrics-server: hack/metrics-server/go.mod hack/metrics-server/go.sum hack/build-metrics-server.sh
	BIN=$(BIN) hack/build-metrics-server.sh
	touch $@

chart: cluster-bins ## Package the Helm chart into bin/fleetlet-VERSION.tgz (version and appVersion: the binaries' version).
	@rm -f $(BIN)/fleetlet-*.tgz
	@hack/step.sh "packaging the chart" $(BIN)/helm package charts/fleetlet --version $(VERSION) --app-version $(VERSION) --destination $(BIN)

upgrade-from: cluster-bins ## Build fleetlet's binary and chart at UPGRADE_FROM (an earlier commit) into bin/upgrade-from: the release the e2e suite upgrades from.
	@REF=$(UPGRADE_FROM) OUT=$(UPGRADE_DIR) BIN=$(BIN) hack/step.sh "building the release to upgrade from ($(UPGRADE_FROM))" hack/build-upgrade-from.sh

image: ## Build the fleetlet image for linux/amd64 and linux/arm64 without Docker: bin/image/oci (OCI layout) and bin/fleetlet-image.tar.
	@for p in $(IMAGE_PLATFORMS); do \
	  hack/step.sh "compiling fleetlet for $$p" env GOOS=$${p%/*} GOARCH=$${p#*/} \
	    $(FLEETLET_BUILD) -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/image/$${p/\//-}/fleetlet ./cmd/fleetlet; \
	done
	@hack/step.sh "assembling the image $(IMAGE_REPOSITORY):$(VERSION)" go run ./hack/image build \
	  $(foreach p,$(IMAGE_PLATFORMS),--binary $(p)=$(BIN)/image/$(subst /,-,$(p))/fleetlet) \
	  --version $(VERSION) --commit $(COMMIT) --ref $(IMAGE_REPOSITORY):$(VERSION) \
	  --created $$(git log -1 --format=%ct 2>/dev/null || echo 0) \
	  --layout $(BIN)/image/oci --archive $(BIN)/fleetlet-image.tar

image-push: image ## Push the image index to REGISTRY/fleetlet:VERSION (credentials: ~/.docker/config.json).
	@[ -n "$(REGISTRY)" ] || { echo "make image-push REGISTRY=registry.example.com/team"; exit 1; }
	go run ./hack/image push --layout $(BIN)/image/oci --ref $(REGISTRY)/fleetlet:$(VERSION)

version: ## Print the version the build stamps.
	@echo $(VERSION) $(COMMIT)

test: build kueue metrics-server image upgrade-from conformance-bins ## Run unit and integration tests, then the e2e suite alone, against real control planes.
	BIN=$(BIN) UPGRADE_DIR=$(UPGRADE_DIR) TEST_TIMEOUT=$(TEST_TIMEOUT) hack/test.sh

e2e: build kueue metrics-server upgrade-from conformance-bins ## Run the end-to-end suite only (a 3-cluster fleetlet sandbox).
	FLEETLET_BIN_DIR=$(BIN) FLEETLET_E2E_UPGRADE_FROM=$(UPGRADE_DIR) FLEETLET_E2E_KUBE_E2E=$(BIN)/kube-e2e.test FLEETLET_E2E_GINKGO=$(BIN)/ginkgo go test -count=1 -timeout $(TEST_TIMEOUT) -v ./e2e/...

conformance-bins: $(BIN)/.conformance ## Build the upstream Kubernetes e2e specs (bin/kube-e2e.test) and the ginkgo CLI from their tools module, hack/conformance.

$(BIN)/.conformance: hack/conformance/go.mod hack/conformance/go.sum hack/conformance/suite/suite_test.go hack/build-conformance.sh
	BIN=$(BIN) hack/build-conformance.sh
	touch $@

conformance: build kueue metrics-server upgrade-from conformance-bins ## Run the upstream sig-node and sig-apps specs in plain and in enabled namespaces, side by side (table: bin/conformance.md; see docs/conformance.md); FOCUS=regex runs a part.
	cd e2e && FLEETLET_BIN_DIR=$(BIN) FLEETLET_E2E_UPGRADE_FROM=$(UPGRADE_DIR) FLEETLET_E2E_KUBE_E2E=$(BIN)/kube-e2e.test \
		FLEETLET_E2E_GINKGO=$(BIN)/ginkgo FLEETLET_E2E_CONFORMANCE='$(or $(FOCUS),full)' FLEETLET_E2E_CONFORMANCE_TABLE=$(BIN)/conformance.md \
		go test -count=1 -timeout 4h -v -run 'TestUpstreamSpecsPassEnabledAsPlain$$' .

bench: build ## Benchmark fleetlet against the same pods created directly in the targets: bursts of PODS (1,000), paced at RATE pods/s (10) for a minute, RUNS (3) times.
	COMMIT=$(COMMIT) go run ./hack/bench --bin-dir $(BIN) --pods $${PODS:-1000} --runs $${RUNS:-3} --rate $${RATE:-10} --placement-pods $${PLACEMENT_PODS:-100} --out $(BIN)/bench.json

unit: ## Run the unit tests only (no binaries needed).
	go test -short -count=1 -timeout 5m ./...

lint: $(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION) ## gofmt, go vet and golangci-lint (.golangci.yaml).
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(BIN)/golangci-lint run ./...

# golangci-lint, built once per version from its module (about 3 minutes cold).
$(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION):
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	touch $@

generate: ## Regenerate deepcopy functions and CRDs from the API types.
	hack/generate.sh

verify: ## Fail when generated files are stale, a tools module drifts from fleetlet's versions, or lint finds anything (CI runs it).
	hack/verify-generate.sh
	hack/align-tools.sh --check hack/conformance
	$(MAKE) lint

diagrams: ## Regenerate docs/diagrams/*.svg from their Graphviz sources (needs dot: apt-get install graphviz).
	@for f in docs/diagrams/*.dot; do dot -Tsvg "$$f" -o "$${f%.dot}.svg" && echo "$${f%.dot}.svg"; done

demo: build ## Start a 3-cluster sandbox in .sandbox and run a pod in each cluster.
	$(BIN)/fleetlet-sandbox demo --dir $(SANDBOX_DIR)

demo-down: ## Stop the demo sandbox.
	$(BIN)/fleetlet-sandbox down --dir $(SANDBOX_DIR)

clean: ## Remove bin/ and the demo sandbox (stopping it first).
	-[ -x $(BIN)/fleetlet-sandbox ] && [ -f $(SANDBOX_DIR)/sandbox.json ] && $(BIN)/fleetlet-sandbox down --dir $(SANDBOX_DIR)
	rm -rf $(BIN) $(SANDBOX_DIR)
