#!/usr/bin/env bash
# Builds the Kueue manager the sandbox can run in the source (its Kueue
# option, which the e2e suite turns on) from its Go module, and copies its
# CRDs and webhook manifests from the same module into bin/kueue-config/.
#
# Kueue v0.17.0 does not compile in fleetlet's own module: with k8s.io
# v0.37.2 one of its dependencies (github.com/kubeflow/trainer/v2) refers to
# core/v1 types that no longer exist. So it is built from its own tools
# module, hack/kueue/go.mod, with the dependency versions Kueue was released
# with (k8s.io v0.35, controller-runtime v0.23): about 5.5 minutes on 2 cores
# the first time, a relink at most after.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
BIN=$(cd "${BIN:-bin}" 2>/dev/null && pwd || { mkdir -p "${BIN:-bin}" && cd "${BIN:-bin}" && pwd; })

cd hack/kueue
version=$(go list -m -f '{{.Version}}' sigs.k8s.io/kueue)
if [ -x "$BIN/kueue" ]; then
  what="building Kueue ${version} (cached: a relink at most)"
else
  what="first build here: compiling Kueue ${version} from its Go module (about 5.5 minutes on 2 cores)"
fi
"$OLDPWD/hack/step.sh" "$what" go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version}" \
  -o "$BIN/kueue" sigs.k8s.io/kueue/cmd/kueue
dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
rm -rf "$BIN/kueue-config"
mkdir -p "$BIN/kueue-config/crd"
cp "$dir"/config/components/crd/bases/*.yaml "$BIN/kueue-config/crd/"
cp "$dir/config/components/webhook/manifests.yaml" "$BIN/kueue-config/webhooks.yaml"
chmod -R u+w "$BIN/kueue-config"
