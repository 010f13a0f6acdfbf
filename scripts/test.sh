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
# Some tests still run the host's own `bash -l` (issue 8 makes them
# hermetic). Where the host's login profile runs `pyenv rehash`, a login
# shell that a test kills midway leaves pyenv's lock behind, and every
# later `bash -l` waits 60 s for it; a real rehash holds it well under a
# second. So while the tests run, a lock older than two seconds is removed.
shims="${PYENV_ROOT:-$HOME/.pyenv}/shims"
if [ -d "$shims" ]; then
  (
    while sleep 1; do
      find "$shims" -maxdepth 1 -name .pyenv-shim ! -newermt '-2 seconds' -delete 2>/dev/null || true
    done
  ) &
  watchdog=$!
  trap 'kill $watchdog 2>/dev/null' EXIT
fi
go vet ./...
go test -timeout 25m -count=1 "${args[@]}"
