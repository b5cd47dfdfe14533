#!/usr/bin/env bash
# Build the workload controllers the e2e suite runs next to the control plane: JobSet and LeaderWorkerSet, at the
# versions pinned in tests/e2e/controllers/go.mod, with their CRDs taken from the same modules.
#
# Output goes to a cache outside the repository, reused when present:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/controllers-<tag>/{jobset-controller,lws-controller,crds/}
# stdout: exactly one line, that directory. stderr: progress and errors.
# Cold build on the shared 2-core box: about 3 minutes for both (the k8s.io modules' build cache warm from the
# control plane's build helps little: other versions).
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

HASH="$(cd "$MOD" && cat go.mod go.sum tools.go | sha256sum | cut -c1-10)"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
OUT="$CACHE_ROOT/controllers-jobset-${JOBSET_VERSION}-lws-${LWS_VERSION}-${HASH}"
if [ -x "$OUT/jobset-controller" ] && [ -x "$OUT/lws-controller" ] && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.controllers.lock"
flock 9
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
chmod -R u+w "$TMP/crds"
printf 'jobset %s\nlws %s\nseconds %s\n' "$JOBSET_VERSION" "$LWS_VERSION" "$(( $(date +%s) - started ))" >"$TMP/BUILD_INFO"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "built in $(( $(date +%s) - started ))s: $OUT"
echo "$OUT"
