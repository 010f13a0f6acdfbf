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
# The CLI and daemon build, and pass vet, for every OS Tupper means to
# serve (with each OS's backends: apple on macOS, wsl on Windows); the
# agent, which runs inside Linux sandboxes and VMs, for Linux's two
# architectures.
for target in linux/arm64 darwin/arm64 windows/amd64; do
  GOOS=${target%/*} GOARCH=${target#*/} go vet ./cmd/tupper
  GOOS=${target%/*} GOARCH=${target#*/} go build -o /dev/null ./cmd/tupper
done
GOARCH=arm64 go build -o /dev/null ./cmd/tupper-agent
go test -timeout 40m -count=1 "${args[@]}"
# The backends whose platform this host lacks ran against stand-ins above;
# their real-platform tests skipped, which go test does not print. Say so,
# by name: not run is not passed.
if [ "${args[*]}" = "./..." ]; then
  echo "== not run here (they need the real platform; make test-backend BACKEND=NAME runs them where it is):"
  go test -count=1 -v -run 'TestConformance/(firecracker|real|wsl.exe)$|TestCheckpointRestoreReal' \
    ./backend/firecracker/ ./backend/apple/ ./backend/wsl/ | grep -E 'NOT RUN|--- SKIP' || true
fi
