#!/usr/bin/env bash
# make test: every package but the e2e suite first (compilation and the
# integration packages' own control planes, two at a time), then the e2e
# suite alone, so that its sandbox of real clusters never competes with
# them for the machine's cores (on 2 cores it then times out).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
: "${BIN:?BIN: the folder of the binaries}"
: "${TEST_TIMEOUT:=30m}"
export FLEETLET_BIN_DIR="$BIN"
# The earlier release the e2e suite starts its sandbox with and upgrades
# from (make upgrade-from).
export FLEETLET_E2E_UPGRADE_FROM="${UPGRADE_DIR:?UPGRADE_DIR: the earlier release (make upgrade-from)}"
# The upstream Kubernetes e2e specs a subset of which the suite runs plain
# and enabled (make conformance-bins).
export FLEETLET_E2E_KUBE_E2E="$BIN/kube-e2e.test" FLEETLET_E2E_GINKGO="$BIN/ginkgo"

stage() { printf '\n==> make test: stage %s\n' "$*"; }
elapsed() { local s=$(( $(date +%s) - $1 )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

all=$(date +%s)
stage "1/2: unit and integration packages (all but e2e/)"
start=$(date +%s)
# shellcheck disable=SC2046 # one word per package
go test -count=1 -timeout "$TEST_TIMEOUT" $(go list ./... | grep -v '/e2e$')
echo "==> stage 1/2 passed in $(elapsed "$start")"

stage "2/2: the e2e suite, alone (compiled first, then run on its sandbox)"
start=$(date +%s)
go test -c -o "$BIN/e2e.test" ./e2e
echo "==> e2e compiled in $(elapsed "$start")"
start=$(date +%s)
(cd e2e && "$BIN/e2e.test" -test.count=1 -test.timeout "$TEST_TIMEOUT" -test.v ${E2E_RUN:+-test.run "$E2E_RUN"})
echo "==> stage 2/2 passed: the e2e suite ran in $(elapsed "$start")"
echo "==> make test passed in $(elapsed "$all")"
