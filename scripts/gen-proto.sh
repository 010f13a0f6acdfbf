#!/usr/bin/env bash
# Regenerates the Go code for proto/*.proto with pinned generators.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${TUPPER_CACHE:-$HOME/.cache/tupper}/bin"
mkdir -p "$bin"
[ -x "$bin/protoc-gen-go" ] || GOBIN="$bin" go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ -x "$bin/protoc-gen-connect-go" ] || GOBIN="$bin" go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler" >&2; exit 1; }
export PATH="$bin:$PATH"
for p in process filesystem; do
  protoc -I proto -I /usr/include \
    --go_out=. --go_opt=module=github.com/lightbearco/tupper \
    --connect-go_out=. --connect-go_opt=module=github.com/lightbearco/tupper \
    "proto/$p/$p.proto"
done
