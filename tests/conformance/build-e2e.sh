#!/usr/bin/env bash
# Build Kubernetes' scheduling end-to-end tests (the e2e.test binary, cut down to test/e2e/scheduling by the
# module in tests/conformance/e2e) at the k8s.io/kubernetes version pinned there, the version of the local control
# plane (tests/e2e/controlplane/go.mod). tests/conformance/run.py runs it against kube-scheduler and gpusched.
#
# The binary goes to a cache outside the repository:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/e2e-<version-tag>/e2e.test
# and is reused when present, so a second run is a fast no-op.
#
# stdout: exactly one line, the binary's path (E2E_TEST=$(tests/conformance/build-e2e.sh)).
# stderr: progress, timings, errors; while another build of the same binary holds the lock, a line a minute
# saying so.
#
# Environment:
#   GPUSCHED_E2E_CACHE   cache root (default $HOME/.cache/gpusched)
#   GPUSCHED_BUILD_NICE  nice level for go test -c (default 15)
#   GPUSCHED_FORCE_BUILD=1  rebuild even if cached
#   GPUSCHED_BUILD_REPORT  a file to write what happened to: "built SECONDS", "cached", or "waited SECONDS"
set -euo pipefail

log() { printf 'build-e2e: %s\n' "$*" >&2; }
report() { if [ -n "${GPUSCHED_BUILD_REPORT:-}" ]; then printf '%s\n' "$*" >"$GPUSCHED_BUILD_REPORT"; fi; }
die() { printf 'build-e2e: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/e2e"
[ -f "$MOD/go.mod" ] || die "missing $MOD/go.mod"

command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (need Go >= 1.26, see tests/e2e/README.md)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"

K8S_VERSION="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod")"
[ -n "$K8S_VERSION" ] || die "could not read the pinned k8s.io/kubernetes version from $MOD/go.mod"
CP_VERSION="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$HERE/../e2e/controlplane/go.mod")"
[ "$K8S_VERSION" = "$CP_VERSION" ] ||
  die "$MOD/go.mod pins k8s.io/kubernetes $K8S_VERSION but the control plane is $CP_VERSION; pin both to one version"
K8S_MAJOR="${K8S_VERSION#v}"; K8S_MAJOR="${K8S_MAJOR%%.*}"
K8S_MINOR="${K8S_VERSION#v*.}"; K8S_MINOR="${K8S_MINOR%%.*}"

# The version stamps the release build sets (the suite logs them and `e2e.test --version` prints them).
LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR"
  LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# Bump when this script changes what it produces.
RECIPE_VERSION=1

# Everything that determines the binary goes into the tag.
RECIPE_HASH="$(
  cd "$MOD" && {
    echo "recipe=$RECIPE_VERSION"
    cat go.mod go.sum
    find . -name '*.go' -type f | LC_ALL=C sort | xargs cat
    printf '%s\n' "$LDFLAGS"
  } | sha256sum | cut -c1-10
)"
TAG="k8s-${K8S_VERSION}-${RECIPE_HASH}"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
OUT="$CACHE_ROOT/e2e-$TAG"

complete() { [ -f "$1/BUILD_INFO" ] && [ -x "$1/e2e.test" ]; }

if [ "${GPUSCHED_FORCE_BUILD:-0}" != 1 ] && complete "$OUT"; then
  log "cached, nothing to build: $OUT/e2e.test ($(grep -h '^build_seconds=' "$OUT/BUILD_INFO" || true))"
  report cached
  echo "$OUT/e2e.test"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
# Serialise concurrent builds of the same tag.
LOCK="$CACHE_ROOT/.e2e-$TAG.lock"
exec 9>"$LOCK"
if command -v flock >/dev/null 2>&1; then
  if ! flock -n 9; then
    WAIT_START=$(date +%s)
    log "another build of this binary holds $LOCK; waiting for it (a cold build takes a while, see docs/conformance.md)"
    until flock -w 60 9; do
      log "still waiting for the other build: $(( $(date +%s) - WAIT_START )) s so far"
    done
    WAITED=$(( $(date +%s) - WAIT_START ))
    log "the other build released the lock after $WAITED s of waiting"
    if [ "${GPUSCHED_FORCE_BUILD:-0}" != 1 ] && complete "$OUT"; then
      log "the other build made the binary; nothing built here: $OUT/e2e.test"
      report "waited $WAITED"
      echo "$OUT/e2e.test"
      exit 0
    fi
    log "the other build left no binary; building it here"
  fi
fi

TMP="$(mktemp -d "$CACHE_ROOT/.e2e-$TAG.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

log "building Kubernetes $K8S_VERSION test/e2e/scheduling with $(go version | awk '{print $3}')"
log "target: $OUT/e2e.test (the Go build cache of the control plane is reused; see docs/conformance.md)"
START=$(date +%s)
(
  cd "$MOD"
  # -mod=mod: a go.sum entry missing for this Go version is fetched rather than failing the build.
  CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n "${GPUSCHED_BUILD_NICE:-15}" \
    go test -c -trimpath -ldflags "$LDFLAGS" -o "$TMP/e2e.test" .
) || die "go test -c failed (see messages above); nothing was cached"
END=$(date +%s)
[ -x "$TMP/e2e.test" ] || die "go test -c succeeded but $TMP/e2e.test is missing"

cat >"$TMP/BUILD_INFO" <<INFO
tag=$TAG
kubernetes=$K8S_VERSION
go=$(go version | awk '{print $3}')
built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
build_seconds=$((END - START))
INFO

rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "built in $((END - START))s: $OUT/e2e.test ($(du -sh "$OUT/e2e.test" 2>/dev/null | cut -f1))"
report "built $((END - START))"
echo "$OUT/e2e.test"
