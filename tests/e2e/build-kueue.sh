#!/usr/bin/env bash
# Build Kueue's controller manager (sigs.k8s.io/kueue ./cmd/kueue) for tests/e2e/test_kueue_e2e.py, at the version
# pinned in tests/e2e/kueue/go.mod, with its CRDs and webhook configurations taken from the same module.
#
# Not part of `make test`'s default builds: only the Kueue tests need it; they skip with the reason when it is
# missing (tests/e2e/skips.py).
#
# Output goes to a cache outside the repository, reused when present:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/kueue-<version>-<hash>/
#     kueue-controller     the manager (controllers + webhook server)
#     crds/                kueue.x-k8s.io CRDs (config/components/crd/bases)
#     webhook/             config/components/webhook (manifests.yaml: the Mutating/ValidatingWebhookConfigurations;
#                          the suite points them at the manager on 127.0.0.1 with its own serving certificate)
# stdout: exactly one line, that directory. stderr: progress and errors.
# GPUSCHED_KUEUE_NO_BUILD=1: only say where a complete cache is (a test that must not wait for a build).
# Build time on the shared 2-core box at nice 15: 181 s wall with the modules downloaded and a Go build cache shared
# with the suite's other builds (load average about 3); nothing when the cache directory is complete.
set -euo pipefail

log() { printf 'build-kueue: %s\n' "$*" >&2; }
die() { printf 'build-kueue: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/kueue"
command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (need Go >= 1.26)"

KUEUE_VERSION="$(awk '{ if ($1 == "require") $0 = substr($0, 9) } $1=="sigs.k8s.io/kueue" && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod")"
[ -n "$KUEUE_VERSION" ] || die "could not read the pinned Kueue version from $MOD/go.mod"

# Bump when this script changes what it produces.
RECIPE_VERSION=1
HASH="$(cd "$MOD" && { echo "recipe=$RECIPE_VERSION"; cat go.mod go.sum tools.go; } | sha256sum | cut -c1-10)"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
OUT="$CACHE_ROOT/kueue-${KUEUE_VERSION}-${HASH}"
complete() {
  [ -x "$OUT/kueue-controller" ] && [ -f "$OUT/BUILD_INFO" ] \
    && [ -f "$OUT/crds/kueue.x-k8s.io_workloads.yaml" ] && [ -f "$OUT/webhook/manifests.yaml" ]
}
if complete && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi
[ -z "${GPUSCHED_KUEUE_NO_BUILD:-}" ] || die "not built yet: $OUT (run tests/e2e/build-kueue.sh)"

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.kueue.lock"
flock 9
# Another run may have built it while this one waited for the lock.
if complete && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.kueue-build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
NICE="${GPUSCHED_BUILD_NICE:-15}"
started=$(date +%s)
cd "$MOD"
log "building kueue-controller (sigs.k8s.io/kueue/cmd/kueue $KUEUE_VERSION)"
CGO_ENABLED=0 nice -n "$NICE" go build -trimpath -ldflags "-s -w" -o "$TMP/kueue-controller" sigs.k8s.io/kueue/cmd/kueue \
  || die "go build sigs.k8s.io/kueue/cmd/kueue failed"
KUEUE_DIR="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
mkdir -p "$TMP/crds"
cp "$KUEUE_DIR"/config/components/crd/bases/*.yaml "$TMP/crds/"
cp -r "$KUEUE_DIR/config/components/webhook" "$TMP/webhook"
chmod -R u+w "$TMP/crds" "$TMP/webhook"
printf 'kueue %s\nseconds %s\n' "$KUEUE_VERSION" "$(( $(date +%s) - started ))" >"$TMP/BUILD_INFO"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "built in $(( $(date +%s) - started ))s: $OUT"
echo "$OUT"
