#!/usr/bin/env bash
# Bundles the web dashboard from web/ into server/dashboard/dist, which the
# tupper binary embeds at its next go build: npm ci (again only when the
# lock file changed) and npm run build (tsc, then esbuild). Skipped when
# web/'s sources and lock file are those of the last bundle (a stamp in
# dist). Needs node and npm. scripts/setup.sh and scripts/dist.sh run it.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${TUPPER_CACHE:-$HOME/.cache/tupper}"

sum=$(cat web/package.json web/package-lock.json web/tsconfig.json web/build.mjs $(find web/src -type f | sort) | sha256sum | cut -d' ' -f1)
if [ "$(cat server/dashboard/dist/.stamp 2>/dev/null)" = "$sum" ] && [ -f server/dashboard/dist/index.html ]; then
  exit 0
fi
printf '\033[1m==> %s\033[0m\n' "building the web dashboard (web/)" >&2
lock=$(sha256sum web/package-lock.json | cut -d' ' -f1)
if [ "$(cat web/node_modules/.tupper-lock-sha256 2>/dev/null)" != "$lock" ]; then
  (cd web && npm ci --prefer-offline --no-audit --no-fund --loglevel=error --cache "$CACHE/npm")
  printf '%s' "$lock" > web/node_modules/.tupper-lock-sha256
fi
(cd web && npm run --silent build)
printf '%s' "$sum" > server/dashboard/dist/.stamp
