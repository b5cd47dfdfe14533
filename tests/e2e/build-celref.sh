#!/usr/bin/env bash
# Build celref (tests/e2e/celref): Kubernetes' own DRA CEL evaluator, at the control plane's version, which
# tests/api/test_cel_reference.py holds gpusched's evaluator against.
#
# The binary goes to a cache outside the repository, ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/celref-<hash>/,
# and is reused when present (about 1.5 min from a cold Go build cache, seconds from a warm one).
# stdout: exactly one line, the binary's path. stderr: progress and errors.
set -euo pipefail

log() { printf 'build-celref: %s\n' "$*" >&2; }
die() { printf 'build-celref: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/celref"
command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (need Go >= 1.26)"
HASH="$(cd "$MOD" && cat go.mod go.sum main.go | sha256sum | cut -c1-10)"
OUT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/celref-$HASH"
if [ -x "$OUT/celref" ]; then
  log "cached: $OUT/celref"
  echo "$OUT/celref"
  exit 0
fi
mkdir -p "$OUT"
TMP="$(mktemp -d "$OUT/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
START=$(date +%s)
(cd "$MOD" && CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n "${GPUSCHED_BUILD_NICE:-15}" go build -trimpath -o "$TMP/celref" .) ||
  die "go build failed (see messages above); nothing was cached"
mv "$TMP/celref" "$OUT/celref"
log "built in $(( $(date +%s) - START )) s: $OUT/celref"
echo "$OUT/celref"
