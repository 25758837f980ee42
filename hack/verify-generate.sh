#!/usr/bin/env bash
# Fails if the generated deepcopy functions or CRDs differ from what
# hack/generate.sh produces from the current API types. It regenerates into a
# temporary copy of the module, so the working tree is never modified.
#
# Usage: hack/verify-generate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

# What generation reads and writes: the module files, the generator scripts,
# the Go packages (the API may import others) and the CRDs.
mkdir -p "${tmp}/config/crd"
cp go.mod go.sum "${tmp}/"
cp -R hack pkg "${tmp}/"
if [[ -d config/crd/bases ]]; then
  cp -R config/crd/bases "${tmp}/config/crd/"
fi

"${tmp}/hack/generate.sh"

status=0
diff -ruN pkg/apis "${tmp}/pkg/apis" || status=1
diff -ruN config/crd/bases "${tmp}/config/crd/bases" || status=1
if [[ ${status} -ne 0 ]]; then
  echo >&2
  echo "ERROR: generated files are out of date (diff above: working tree vs. regenerated)." >&2
  echo "Run hack/generate.sh (make generate) and commit the result." >&2
  exit 1
fi
echo "Generated files are up to date."
