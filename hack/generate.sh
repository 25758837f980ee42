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

# The Helm chart renders the same CRDs as templates (so that `helm upgrade`
# updates them); its tests check that the copies match.
chart_crd_dir=charts/fleetlet/files/crds
mkdir -p "${chart_crd_dir}"
rm -f "${chart_crd_dir}"/multicluster.fleetlet.io_*.yaml
cp "${crd_dir}"/multicluster.fleetlet.io_*.yaml "${chart_crd_dir}/"
