#!/usr/bin/env bash
# Installs and builds everything Tupper needs on a fresh Debian machine, and
# caches it: a second run takes seconds. Needs root (it installs packages
# and, later, runs sandboxes).
#
#   scripts/setup.sh          install dependencies and build bin/tupper, bin/tupper-agent
set -euo pipefail
cd "$(dirname "$0")/.."

RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
CACHE="${TUPPER_CACHE:-$HOME/.cache/tupper}"
mkdir -p "$CACHE/bin"

# say announces a step (in bold on a terminal, plain into a pipe or a log);
# done_since says how long a long one took, from the $SECONDS it started at.
say() { if [ -t 2 ]; then printf '\033[1m==> %s\033[0m\n' "$*" >&2; else printf '==> %s\n' "$*" >&2; fi; }
done_since() { say "done in $((SECONDS - $1))s"; }

if [ "$(id -u)" != 0 ]; then
  echo "setup: Tupper runs sandboxes as root; run this as root (sudo $0)" >&2
  exit 1
fi

# Debian packages: mmdebstrap builds images, iproute2 and nftables wire
# sandbox networks, busybox-static makes tiny test images. The Jupyter
# kernel and TypeScript are what the code interpreter's own tests run on
# the host (agent/interpreter), as the code-interpreter template has them.
# runc is the container backend; e2fsprogs makes its sandboxes' disks and
# the disk images of the VM backends. chromium runs the web dashboard's
# browser tests (e2e/dashboard_test.go), headless.
need=()
for pkg in mmdebstrap iproute2 iptables nftables busybox-static ca-certificates runc e2fsprogs \
  python3-ipykernel python3-jupyter-client python3-matplotlib python3-pandas node-typescript chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  start=$SECONDS
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  done_since $start
fi

# gVisor's runsc, built from the Go module proxy at a pinned version. A cgo
# build fails at sandbox start, so CGO_ENABLED=0 is required.
if [ "$(cat "$CACHE/bin/runsc.version" 2>/dev/null)" != "$RUNSC_VERSION" ] || [ ! -x "$CACHE/bin/runsc" ]; then
  say "building runsc $RUNSC_VERSION (about 3 minutes the first time)"
  start=$SECONDS
  CGO_ENABLED=0 GOBIN="$CACHE/bin" go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
  echo "$RUNSC_VERSION" > "$CACHE/bin/runsc.version"
  done_since $start
fi
if ! cmp -s "$CACHE/bin/runsc" /usr/local/bin/runsc 2>/dev/null; then
  install -m 0755 "$CACHE/bin/runsc" /usr/local/bin/runsc
fi

# Every process in a gVisor sandbox is backed by host tasks, and Tupper
# admits sandboxes only while their host task limits fit in what the host
# spares (kernel.pid_max and kernel.threads-max less a quarter; see
# docs/design/limits.md). systemd raises pid_max to 4194304 on most
# distributions; a host left at the kernel's 32768 holds a few sandboxes.
if [ "$(cat /proc/sys/kernel/pid_max)" -lt 4194304 ]; then
  say "raising kernel.pid_max from $(cat /proc/sys/kernel/pid_max) to 4194304, systemd's default"
  sysctl -qw kernel.pid_max=4194304
fi

# The web dashboard, bundled from web/ by npm into server/dashboard/dist,
# which bin/tupper embeds; again only when web/'s sources or lock file
# changed. Without npm the daemon serves a page saying how to build it.
if command -v npm >/dev/null; then
  scripts/build-dashboard.sh
else
  say "npm is missing: bin/tupper is built without the web dashboard (apt-get install npm)"
fi

say "building bin/tupper and bin/tupper-agent"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -o bin/tupper ./cmd/tupper
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/tupper-agent ./cmd/tupper-agent

# The npm packages under js/ (e2e/js_test.go builds and tests them), from
# their lock files; a tree installed from the same lock file is kept, under
# the stamp the e2e tests' npm ci writes too.
if command -v npm >/dev/null; then
  for dir in js/*/; do
    [ -f "$dir/package-lock.json" ] || continue
    sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    [ "$(cat "$dir/node_modules/.tupper-lock-sha256" 2>/dev/null)" = "$sum" ] && continue
    say "installing the npm packages of ${dir%/}"
    (cd "$dir" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error --cache "$CACHE/npm")
    printf '%s' "$sum" > "$dir/node_modules/.tupper-lock-sha256"
  done
fi
