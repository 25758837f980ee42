#!/usr/bin/env bash
# Prints the version of this checkout, one line "VERSION COMMIT", for the
# Makefile to stamp into every binary (pkg/version), the chart (version and
# appVersion) and the image (tag and labels).
#
# The base is charts/fleetlet/Chart.yaml's version: a commit tagged
# v<base> is <base>; any other is <base>-dev.g<short commit> (a SemVer
# pre-release, so it sorts before the release, and a valid image tag and
# chart version), with ".dirty" when the tree has changes.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/fleetlet/Chart.yaml)
if ! commit=$(git rev-parse HEAD 2>/dev/null); then
  echo "${base}-dev.unknown unknown"
  exit 0
fi
if [ "$(git tag --points-at HEAD --list "v${base}")" = "v${base}" ]; then
  version=$base
else
  version="${base}-dev.g$(git rev-parse --short=7 HEAD)"
fi
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  if [ "$version" = "$base" ]; then version="${base}-dirty"; else version="${version}.dirty"; fi
  commit="${commit}-dirty"
fi
echo "$version $commit"
