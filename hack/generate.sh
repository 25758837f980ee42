#!/usr/bin/env bash
# Generates, from the API types in pkg/apis, their deepcopy functions
# (zz_generated.deepcopy.go beside the types) and their CRDs
# (config/crd/bases), with controller-gen as pinned in go.mod's tool block.
#
# Usage: hack/generate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

crd_dir=config/crd/bases

# Start from an empty CRD directory so that a CRD whose type is gone does not
# linger.
rm -f "${crd_dir}"/multicluster.fleetlet.io_*.yaml
mkdir -p "${crd_dir}"

go tool controller-gen \
  object:headerFile=hack/boilerplate.go.txt \
  crd \
  paths=./pkg/apis/... \
  output:crd:dir="${crd_dir}"
