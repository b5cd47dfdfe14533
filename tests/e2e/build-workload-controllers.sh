#!/usr/bin/env bash
# Build the workload controllers the e2e suite runs next to the control plane: JobSet and LeaderWorkerSet, at the
# versions pinned in tests/e2e/controllers/go.mod, with their CRDs taken from the same modules.
#
# Output goes to a cache outside the repository, reused when present:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/controllers-<tag>/
#     jobset-controller, lws-controller
#     crds/                 JobSet, LeaderWorkerSet and DisaggregatedSet (the LWS controller watches it)
#     webhooks/{jobset,lws} each module's webhook kustomization (manifests and patches), rendered by the suite with
#                           `kubectl kustomize` and pointed at the controller's webhook server on 127.0.0.1
# stdout: exactly one line, that directory. stderr: progress and errors.
# Build time on the shared 2-core box, both controllers: 242 s with an empty Go build cache and the modules
# downloaded (3 min 50 s user + 51 s sys of CPU; the control plane's build cache helps little: other k8s.io
# versions), 8 s with a warm Go build cache, nothing when the cache directory is complete.
set -euo pipefail

log() { printf 'build-workload-controllers: %s\n' "$*" >&2; }
die() { printf 'build-workload-controllers: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/controllers"
command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (need Go >= 1.26)"

modver() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod"; }
JOBSET_VERSION="$(modver sigs.k8s.io/jobset)"
LWS_VERSION="$(modver sigs.k8s.io/lws)"
[ -n "$JOBSET_VERSION" ] && [ -n "$LWS_VERSION" ] || die "could not read pinned versions from $MOD/go.mod"

# Bump when this script changes what it produces (2: DisaggregatedSet CRD and the webhook manifests).
RECIPE_VERSION=2
HASH="$(cd "$MOD" && { echo "recipe=$RECIPE_VERSION"; cat go.mod go.sum tools.go; } | sha256sum | cut -c1-10)"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
OUT="$CACHE_ROOT/controllers-jobset-${JOBSET_VERSION}-lws-${LWS_VERSION}-${HASH}"
complete() {
  [ -x "$OUT/jobset-controller" ] && [ -x "$OUT/lws-controller" ] && [ -f "$OUT/BUILD_INFO" ] \
    && [ -f "$OUT/webhooks/jobset/kustomization.yaml" ] && [ -f "$OUT/webhooks/lws/kustomization.yaml" ]
}
if complete && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.controllers.lock"
flock 9
# Another run may have built it while this one waited for the lock.
if complete && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.controllers-build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
NICE="${GPUSCHED_BUILD_NICE:-15}"
started=$(date +%s)
cd "$MOD"
for spec in "jobset-controller sigs.k8s.io/jobset" "lws-controller sigs.k8s.io/lws/cmd"; do
  set -- $spec
  log "building $1 ($2)"
  CGO_ENABLED=0 nice -n "$NICE" go build -trimpath -ldflags "-s -w" -o "$TMP/$1" "$2" || die "go build $2 failed"
done
mkdir -p "$TMP/crds"
JOBSET_DIR="$(go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)"
LWS_DIR="$(go list -m -f '{{.Dir}}' sigs.k8s.io/lws)"
cp "$JOBSET_DIR/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$TMP/crds/"
cp "$LWS_DIR/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" "$TMP/crds/"
cp "$LWS_DIR/config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml" "$TMP/crds/"
mkdir -p "$TMP/webhooks"
cp -r "$JOBSET_DIR/config/components/webhook" "$TMP/webhooks/jobset"
cp -r "$LWS_DIR/config/webhook" "$TMP/webhooks/lws"
chmod -R u+w "$TMP/crds" "$TMP/webhooks"
printf 'jobset %s\nlws %s\nseconds %s\n' "$JOBSET_VERSION" "$LWS_VERSION" "$(( $(date +%s) - started ))" >"$TMP/BUILD_INFO"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "built in $(( $(date +%s) - started ))s: $OUT"
echo "$OUT"
