#!/usr/bin/env bash
# Keeps a tools module (hack/conformance) on the versions
# fleetlet's own go.mod selects, for every module whose packages the tool
# compiles: Go's build cache is keyed on a package's source and on its
# dependencies', so a tool built from the same versions (and with the same
# flags, see the Makefile) reuses the compile of the Kubernetes packages
# fleetlet's binaries and tests already paid for instead of compiling them
# again. On a cold machine that is minutes per tool.
#
#   hack/align-tools.sh DIR...          move DIR's go.mod to fleetlet's versions
#   hack/align-tools.sh --check DIR...  list what differs, and fail if anything does
#
# Kueue and metrics-server (hack/kueue, hack/metrics-server) stay on the
# versions they were released with: on fleetlet's Kubernetes version the
# first does not compile and the second panics at start (their build
# scripts say why).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
check=false
if [ "${1:-}" = --check ]; then check=true; shift; fi
[ $# -gt 0 ] || { echo "usage: $0 [--check] DIR..." >&2; exit 2; }
root=$PWD

# "path version" of every module in fleetlet's build list (a replacement's
# version where go.mod replaces the module).
fleetlet=$(go list -m -f '{{if .Replace}}{{.Path}} {{.Replace.Version}}{{else}}{{.Path}} {{.Version}}{{end}}' all | sort -u)

# "path theirs ours" for each module a tool compiles packages of whose
# version differs from fleetlet's.
differ() {
  (cd "$root/$1" &&
    # shellcheck disable=SC2046 # one word per package
    go list -deps -test -f '{{with .Module}}{{if .Replace}}{{.Path}} {{.Replace.Version}}{{else}}{{.Path}} {{.Version}}{{end}}{{end}}' \
      $(go list tool 2>/dev/null) $(go list ./... 2>/dev/null) | sort -u) |
    join - <(echo "$fleetlet") | awk '$2 != $3'
}

status=0
for dir in "$@"; do
  if ! $check; then
    for _ in 1 2 3; do
      d=$(differ "$dir")
      [ -n "$d" ] || break
      # shellcheck disable=SC2046 # one word per module
      (cd "$dir" && go get $(echo "$d" | awk '{print $1 "@" $3}') && go mod tidy)
    done
  fi
  d=$(differ "$dir")
  if [ -n "$d" ]; then
    echo "$dir compiles these modules at other versions than fleetlet does (module, $dir's, fleetlet's), so their compile is not shared; hack/align-tools.sh $dir moves them:" >&2
    echo "$d" >&2
    status=1
  fi
done
exit $status
