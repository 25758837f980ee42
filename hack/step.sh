#!/usr/bin/env bash
# step.sh WHAT COMMAND...: says WHAT as it starts, runs COMMAND, and says how
# long it took (or that it failed), so that a long build is never a silent
# wait. The Makefile and hack/*.sh announce their steps with it.
set -uo pipefail
what=$1
shift
start=$(date +%s)
took() { local s=$(( $(date +%s) - start )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
printf '==> %s\n' "$what"
"$@"
rc=$?
if [ "$rc" -ne 0 ]; then
  printf '==> %s: FAILED after %s\n' "$what" "$(took)"
  exit "$rc"
fi
printf '==> %s: done in %s\n' "$what" "$(took)"
