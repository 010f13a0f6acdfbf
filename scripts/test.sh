#!/usr/bin/env bash
# Runs the whole test suite on real runsc. Sets everything up first.
#
#   scripts/test.sh [go test flags...]   e.g. scripts/test.sh -run Conformance ./backend/...
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export TUPPER_AGENT="$PWD/bin/tupper-agent"
# In CI nothing that matters may be skipped: tests that would skip for a
# missing runtime fail instead.
if [ "${CI:-}" = true ]; then export TUPPER_REQUIRE_ALL=1; fi
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(./...)
go vet ./...
go test -timeout 25m -count=1 "${args[@]}"
