#!/usr/bin/env bash
# Writes Tupper's release archives, one per platform the CLI and daemon
# serve, with their SHA-256 sums:
#
#   scripts/dist.sh [OUT]     default OUT: dist/
#
# Each archive holds tupper (tupper.exe on Windows), the tupper-agent that
# runs inside that platform's sandboxes (a static linux binary: amd64 on
# Linux/amd64 and Windows, whose WSL runs amd64; arm64 on Linux/arm64 and
# on macOS, whose containers run arm64 Linux), and the README. VERSION
# overrides the version stamped into the binaries (default: git describe).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-dist}"
version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
ldflags="-s -w -X github.com/lightbearco/tupper/internal/cli.Version=$version"

# The web dashboard, which every tupper embeds.
scripts/build-dashboard.sh

for arch in amd64 arm64; do
  say "tupper-agent linux/$arch"
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags="-s -w" -o "$work/agent-$arch/tupper-agent" ./cmd/tupper-agent
done

archives=()
for target in linux/amd64 linux/arm64 darwin/arm64 windows/amd64; do
  os=${target%/*} arch=${target#*/}
  say "tupper $os/$arch"
  name="tupper-$version-$os-$arch"
  dir="$work/$name"
  mkdir -p "$dir"
  exe=tupper
  [ "$os" = windows ] && exe=tupper.exe
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags="$ldflags" -o "$dir/$exe" ./cmd/tupper
  agent_arch=$arch
  [ "$os" = darwin ] && agent_arch=arm64
  cp "$work/agent-$agent_arch/tupper-agent" "$dir/tupper-agent"
  cp README.md "$dir/"
  tar -C "$work" -czf "$out/$name.tar.gz" "$name"
  archives+=("$name.tar.gz")
done

(cd "$out" && sha256sum "${archives[@]}" > SHA256SUMS)
say "wrote ${#archives[@]} archives and SHA256SUMS to $out"
