#!/usr/bin/env bash
# Build Helm (helm.sh/helm/v4 at the version pinned in tests/e2e/helm/go.mod), which the suite uses to check
# charts/gpusched with Helm itself: `helm lint --strict`, `helm template`, and `helm install` / `helm uninstall`
# into the local control plane (tests/e2e/test_helm_chart_e2e.py).
#
# The binary goes to a cache outside the repository, reused when present:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/helm-<version>-<hash>/helm
# stdout: exactly one line, the binary's path (HELM=$(tests/e2e/build-helm.sh)). stderr: progress and errors.
# Build time on the shared 2-core box: 374 s with an empty Go build cache and the modules downloaded, beside the
# control plane's cold build (load average 12; 2 min 22 s user + 31 s sys of CPU); nothing when cached.
#
# Environment:
#   GPUSCHED_E2E_CACHE      cache root (default $HOME/.cache/gpusched)
#   GPUSCHED_BUILD_NICE     nice level for go build (default 15)
#   GPUSCHED_FORCE_BUILD=1  rebuild even if cached
set -euo pipefail

log() { printf 'build-helm: %s\n' "$*" >&2; }
die() { printf 'build-helm: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/helm"
[ -f "$MOD/go.mod" ] || die "missing $MOD/go.mod"
command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (need Go >= 1.26, see tests/e2e/README.md)"

# "require helm.sh/helm/v4 vX" on one line, or the module's line in a require block.
HELM_VERSION="$(awk '$1=="require" {$1=""; $0=$0} $1=="helm.sh/helm/v4" && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod")"
[ -n "$HELM_VERSION" ] || die "could not read the pinned helm.sh/helm/v4 version from $MOD/go.mod"

# What `helm version` reports, as Helm's own release build sets it (without it: v4.3, no build metadata).
LDFLAGS="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
LDFLAGS+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

# Bump when this script changes what it produces.
RECIPE_VERSION=1
HASH="$(cd "$MOD" && { echo "recipe=$RECIPE_VERSION $LDFLAGS"; cat go.mod go.sum tools.go; } | sha256sum | cut -c1-10)"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
OUT="$CACHE_ROOT/helm-${HELM_VERSION}-${HASH}"
complete() { [ -x "$OUT/helm" ] && [ -f "$OUT/BUILD_INFO" ]; }

if complete && [ "${GPUSCHED_FORCE_BUILD:-0}" != 1 ]; then
  log "cached: $OUT/helm"
  echo "$OUT/helm"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.helm.lock"
flock 9
# Another run may have built it while this one waited for the lock.
if complete && [ "${GPUSCHED_FORCE_BUILD:-0}" != 1 ]; then
  log "built by another run while this one waited: $OUT/helm"
  echo "$OUT/helm"
  exit 0
fi

TMP="$(mktemp -d "$CACHE_ROOT/.helm-build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
log "building Helm $HELM_VERSION with $(go version | awk '{print $3}')"
START=$(date +%s)
(
  cd "$MOD"
  CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n "${GPUSCHED_BUILD_NICE:-15}" \
    go build -trimpath -ldflags "$LDFLAGS" -o "$TMP/helm" helm.sh/helm/v4/cmd/helm
) || die "go build failed (see messages above); nothing was cached"
END=$(date +%s)
[ -x "$TMP/helm" ] || die "go build succeeded but $TMP/helm is missing"
cat >"$TMP/BUILD_INFO" <<INFO
helm=$HELM_VERSION
go=$(go version | awk '{print $3}')
built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
build_seconds=$((END - START))
INFO
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "built in $((END - START))s: $OUT/helm"
echo "$OUT/helm"
