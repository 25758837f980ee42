#!/usr/bin/env bash
# Builds fleetlet's binary and packaged chart as they were at an earlier
# commit, REF, into OUT: the release the e2e suite upgrades from
# (e2e/upgrade_test.go). A second run for the same commit does nothing.
# The commit comes from this clone's history (git archive), the Go modules
# from the module cache: nothing is downloaded but what go.mod names.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
: "${REF:?REF: the commit to build}" "${OUT:?OUT: the folder to build into}" "${BIN:?BIN: the folder with helm}"
if ! git rev-parse --quiet --verify "${REF}^{commit}" >/dev/null; then
  # A shallow clone: fetch the history that holds REF.
  git fetch --quiet --unshallow origin 2>/dev/null || git fetch --quiet origin "$REF" 2>/dev/null || true
fi
if ! commit=$(git rev-parse --quiet --verify "${REF}^{commit}"); then
  echo "build-upgrade-from: commit $REF is not in this clone's history (clone without --depth, or set UPGRADE_FROM)" >&2
  exit 1
fi
if [ -f "$OUT/.commit" ] && [ "$(cat "$OUT/.commit")" = "$commit" ]; then
  exit 0
fi
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git archive "$commit" | tar -x -C "$src"
# The version hack/version.sh gives that commit when untagged.
base=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$src/charts/fleetlet/Chart.yaml")
version="${base}-dev.g${commit:0:7}"
rm -rf "$OUT"
mkdir -p "$OUT"
(cd "$src" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-X github.com/fleetlet/fleetlet/pkg/version.version=$version -X github.com/fleetlet/fleetlet/pkg/version.commit=$commit" \
  -o "$OUT/" ./cmd/fleetlet)
"$BIN/helm" package "$src/charts/fleetlet" --version "$version" --app-version "$version" --destination "$OUT" >/dev/null
echo "$commit" >"$OUT/.commit"
echo "fleetlet $version built into $OUT"
