#!/usr/bin/env bash
# Fetch Debian's headless Chromium (the chromium-headless-shell package) for the dashboard's browser tests
# (tests/e2e/test_dashboard_e2e.py), without root: the .deb files are fetched with `apt-get download` and unpacked
# with `dpkg-deb -x` into a cache outside the repository, with the libraries it needs that the machine lacks.
#
# Cache: ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/chromium-<version>/ (reused when present; about 10 s and
# 100 MB the first time). It is the package of the machine's own Debian release, so its libraries match.
# stdout: exactly one line, the path of a script that runs the browser. stderr: progress and errors.
set -euo pipefail

log() { printf 'build-chromium: %s\n' "$*" >&2; }
die() { printf 'build-chromium: ERROR: %s\n' "$*" >&2; exit 1; }

PACKAGE=chromium-headless-shell
# shellcheck source=debian-package.sh
source "$(dirname "${BASH_SOURCE[0]}")/debian-package.sh"
need_tools apt-get apt-cache dpkg-deb dpkg-query ldd
VERSION="$(candidate_version "$PACKAGE")"
OUT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/chromium-${VERSION//[^A-Za-z0-9.+-]/_}"
if [ -x "$OUT/chromium" ]; then
  log "cached: $OUT/chromium"
  echo "$OUT/chromium"
  exit 0
fi
mkdir -p "$OUT"
TMP="$(mktemp -d "$OUT/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
START=$(date +%s)

# The package, its data files, and every library package of its dependency tree this machine does not have
# (the first of alternatives; fonts, debconf and desktop helpers are not needed headless).
wanted=("$PACKAGE" chromium-common)
while read -r dep; do
  case "$dep" in
    "<"*) continue ;;
    lib*) ;;
    *) continue ;;
  esac
  dpkg-query -W -f='${Status}\n' "$dep" 2>/dev/null | grep -q "install ok installed" || wanted+=("$dep")
done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
  --no-enhances "$PACKAGE" 2>/dev/null | grep -v '^ ' | sort -u)
log "fetching ${#wanted[@]} packages: ${wanted[*]}"
# -o APT::Sandbox::User=root: apt fetches into this directory as the caller (root or not) without a warning.
(cd "$TMP" && apt-get -o APT::Sandbox::User="$(id -un)" download "${wanted[@]}" >&2) || die "apt-get download failed (see above)"
for deb in "$TMP"/*.deb; do
  dpkg-deb -x "$deb" "$TMP/root"
done
BROWSER="$TMP/root/usr/lib/chromium/$PACKAGE"
[ -x "$BROWSER" ] || die "$PACKAGE's binary is not at usr/lib/chromium/$PACKAGE in the package"
ARCH_LIB="usr/lib/$(uname -m)-linux-gnu"
# libpulse keeps its private library in a directory of its own.
libdirs() { printf '%s' "$1/$ARCH_LIB:$1/$ARCH_LIB/pulseaudio:$1/lib/$(uname -m)-linux-gnu"; }
LIBS="$(libdirs "$TMP/root")"
missing="$(LD_LIBRARY_PATH="$LIBS" ldd "$BROWSER" | awk '/not found/ {print $1}' | tr '\n' ' ')"
[ -z "$missing" ] || die "libraries still missing after unpacking: $missing"

rm -rf "$OUT/root"
mv "$TMP/root" "$OUT/root"
ROOT="$OUT/root"
cat >"$OUT/chromium.tmp" <<EOF
#!/bin/sh
# Debian's $PACKAGE $VERSION, unpacked by tests/e2e/build-chromium.sh.
LD_LIBRARY_PATH="$(libdirs "$ROOT")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "$ROOT/usr/lib/chromium/$PACKAGE" "\$@"
EOF
chmod +x "$OUT/chromium.tmp"
"$OUT/chromium.tmp" --version >&2 || die "the unpacked browser does not start (see above)"
mv "$OUT/chromium.tmp" "$OUT/chromium"
log "ready in $(( $(date +%s) - START )) s: $OUT/chromium"
echo "$OUT/chromium"
