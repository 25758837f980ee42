#!/usr/bin/env bash
# Builds the upstream Kubernetes e2e specs fleetlet is judged by into
# bin/kube-e2e.test (the sig-node pod specs and the sig-apps workload specs,
# hack/conformance/suite, compiled from the k8s.io/kubernetes module of the
# sandbox's version) and the ginkgo CLI that runs them in parallel into
# bin/ginkgo, from their own tools module, hack/conformance/go.mod: the
# e2e framework's dependencies stay out of fleetlet's go.mod. Every module
# both compile is at fleetlet's version (hack/align-tools.sh, checked by
# `make verify`) and the Makefile gives every build the same flags, so the
# Kubernetes packages fleetlet's own build compiled are not compiled again.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
BIN=$(cd "${BIN:-bin}" 2>/dev/null && pwd || { mkdir -p "${BIN:-bin}" && cd "${BIN:-bin}" && pwd; })

root=$PWD
cd hack/conformance
kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
want=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
if [ "$kube_version" != "$want" ]; then
  echo "hack/conformance/go.mod has k8s.io/kubernetes $kube_version, the sandbox runs $want: make them agree" >&2
  exit 1
fi
if [ -x "$BIN/kube-e2e.test" ]; then
  what="building the upstream e2e specs of Kubernetes ${kube_version} (cached: a relink at most)"
else
  what="first build here: compiling the upstream e2e specs of Kubernetes ${kube_version} (about 4 minutes on 2 cores after fleetlet's own build)"
fi
"$root/hack/step.sh" "$what" go test -c -o "$BIN/kube-e2e.test" ./suite
"$root/hack/step.sh" "building the ginkgo CLI" go build -o "$BIN/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
