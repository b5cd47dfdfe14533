#!/usr/bin/env bash
# Fetch Debian's Prometheus (the prometheus package: `prometheus` and `promtool`) for the suite's Prometheus tests:
# tests/e2e/test_prometheus_e2e.py scrapes `gpusched run` with it and evaluates the Grafana dashboard's queries, and
# tests/deploy/test_prometheus_rules.py runs `promtool test rules` on the alert rules. Without root: the .deb is
# fetched with `apt-get download` and unpacked with `dpkg-deb -x` into a cache outside the repository, as
# build-chromium.sh does for Chromium. Both binaries are Go programs linked against libc only; the web UI's
# JavaScript packages it depends on are not fetched (the tests use the HTTP API).
#
# Cache: ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/prometheus-<version>-<hash>/ (the hash covers the package
# version and this recipe; reused when present; about 2 s and 20 MB the first time).
# stdout: exactly one line, the cache directory, holding `prometheus` and `promtool`. stderr: progress and errors.
set -euo pipefail

log() { printf 'build-prometheus: %s\n' "$*" >&2; }
die() { printf 'build-prometheus: ERROR: %s\n' "$*" >&2; exit 1; }

PACKAGE=prometheus
# Bump when this script changes what it produces.
RECIPE_VERSION=1
# shellcheck source=debian-package.sh
source "$(dirname "${BASH_SOURCE[0]}")/debian-package.sh"
need_tools apt-get apt-cache dpkg-deb sha256sum
VERSION="$(candidate_version "$PACKAGE")"
UPSTREAM="${VERSION%%+*}"
HASH="$(printf 'recipe=%s package=%s\n' "$RECIPE_VERSION" "$VERSION" | sha256sum | cut -c1-10)"
OUT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/prometheus-${UPSTREAM//[^A-Za-z0-9.+-]/_}-$HASH"
if [ -x "$OUT/prometheus" ] && [ -x "$OUT/promtool" ]; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi
mkdir -p "$OUT"
TMP="$(mktemp -d "$OUT/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
START=$(date +%s)
log "fetching $PACKAGE $VERSION"
# -o APT::Sandbox::User: apt fetches into this directory as the caller (root or not) without a warning.
(cd "$TMP" && apt-get -o APT::Sandbox::User="$(id -un)" download "$PACKAGE" >&2) || die "apt-get download failed (see above)"
dpkg-deb -x "$TMP"/*.deb "$TMP/root"
for binary in prometheus promtool; do
  [ -x "$TMP/root/usr/bin/$binary" ] || die "$binary is not at usr/bin/$binary in the package"
  "$TMP/root/usr/bin/$binary" --version >&2 || die "the unpacked $binary does not start (see above)"
done
# promtool last: its presence says the directory is complete.
mv "$TMP/root/usr/bin/prometheus" "$OUT/prometheus"
mv "$TMP/root/usr/bin/promtool" "$OUT/promtool"
log "ready in $(( $(date +%s) - START )) s: $OUT"
echo "$OUT"
