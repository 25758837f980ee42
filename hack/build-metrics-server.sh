#!/usr/bin/env bash
# Builds metrics-server, which the sandbox runs in every cluster for `kubectl
# top` and the HorizontalPodAutoscaler (`up --metrics-server`), from its Go
# module into bin/metrics-server.
#
# It is built from its own tools module, hack/metrics-server/go.mod, at the
# dependency versions metrics-server v0.8.0 was released with (k8s.io
# v0.33): about 4 minutes on 2 cores the first time, a relink after.
# Built with the main module's k8s.io v0.37.2 instead, it compiles but
# panics at start (its generated OpenAPI names no longer match:
# "cannot find model definition for ...metrics.v1beta1.NodeMetrics").
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
BIN=$(cd "${BIN:-bin}" 2>/dev/null && pwd || { mkdir -p "${BIN:-bin}" && cd "${BIN:-bin}" && pwd; })

cd hack/metrics-server
version=$(go list -m -f '{{.Version}}' sigs.k8s.io/metrics-server)
if [ -x "$BIN/metrics-server" ]; then
  what="building metrics-server ${version} (cached: a relink at most)"
else
  what="first build here: compiling metrics-server ${version} from its Go module (about 4 minutes on 2 cores)"
fi
"$OLDPWD/hack/step.sh" "$what" go build -trimpath -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=${version}" \
  -o "$BIN/metrics-server" sigs.k8s.io/metrics-server/cmd/metrics-server
