#!/usr/bin/env bash
# Build the peer schedulers that benchmarks/e2e_throughput.py measures gpusched against: Volcano's scheduler
# (with its controller manager, whose podgroup controller gives plain pods the PodGroup Volcano's scheduler
# needs) and the scheduler-plugins scheduler (kube-scheduler with Coscheduling), at the versions pinned in
# tests/e2e/peers/{volcano,coscheduling}/go.mod, with their CRDs taken from the same modules.
#
# Not part of .ci/run or `make test`: only the benchmark's peer cases need these binaries.
#
# Output goes to a cache outside the repository, reused when present:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/peers-<tag>/
#     vc-scheduler, vc-controller-manager   Volcano
#     sp-scheduler                          scheduler-plugins' kube-scheduler
#     crds/volcano/                         Volcano's CRDs (scheduling.volcano.sh PodGroup and Queue among them)
#     crds/coscheduling/                    scheduling.x-k8s.io PodGroup
# stdout: exactly one line, that directory. stderr: progress and errors.
# Build time on the shared 2-core box (load average 3 to 6 from other jobs), all three binaries at nice 15:
# 465 s wall, 476 s user + 117 s sys of CPU, with the modules downloaded (go mod tidy, about 25 s) and no
# package of Kubernetes v1.34.4 in the Go build cache; 12 s with a warm Go build cache; nothing when the cache
# directory is complete.
#
# Pins. The Go module proxy reachable here serves only some versions. Volcano: v1.15.1 is served, but the
# volcano.sh/apis its go.mod needs (the release replaces it with an in-repo copy that the module zip leaves out)
# is refused at v1.15.1 and v1.15.0; volcano.sh/volcano v1.14.0, v1.13.0, v1.13.1 and v1.12.1 are refused;
# v1.14.1 (go 1.24 in its go.mod, builds with Go 1.26) is served and is built here with volcano.sh/apis v1.14.0
# (v1.14.1 refused). scheduler-plugins v0.34.7 builds with Kubernetes v1.34.7, whose k8s.io/kubernetes and
# k8s.io/cluster-bootstrap are refused; both peers are built against Kubernetes v1.34.4, the newest 1.34 patch
# of k8s.io/kubernetes served. Each go.mod otherwise copies its release's replace block.
set -euo pipefail

log() { printf 'build-peers: %s\n' "$*" >&2; }
die() { printf 'build-peers: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VC_MOD="$HERE/peers/volcano"
SP_MOD="$HERE/peers/coscheduling"
command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (need Go >= 1.26)"

# Both `require M v` and a line inside a `require (...)` block.
modver() { awk -v m="$2" '{ if ($1 == "require") $0 = substr($0, 9) } $1==m && $2 ~ /^v/ {print $2; exit}' "$1/go.mod"; }
VOLCANO_VERSION="$(modver "$VC_MOD" volcano.sh/volcano)"
SP_VERSION="$(modver "$SP_MOD" sigs.k8s.io/scheduler-plugins)"
[ -n "$VOLCANO_VERSION" ] && [ -n "$SP_VERSION" ] || die "could not read pinned versions from the peers' go.mod"

# Bump when this script changes what it produces (3: all of Volcano's CRDs).
RECIPE_VERSION=3
HASH="$({ echo "recipe=$RECIPE_VERSION"; cat "$VC_MOD"/go.mod "$VC_MOD"/go.sum "$VC_MOD"/tools.go \
  "$SP_MOD"/go.mod "$SP_MOD"/go.sum "$SP_MOD"/tools.go; } | sha256sum | cut -c1-10)"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
OUT="$CACHE_ROOT/peers-volcano-${VOLCANO_VERSION}-sp-${SP_VERSION}-${HASH}"
complete() {
  [ -x "$OUT/vc-scheduler" ] && [ -x "$OUT/vc-controller-manager" ] && [ -x "$OUT/sp-scheduler" ] \
    && [ -f "$OUT/BUILD_INFO" ] && [ -f "$OUT/crds/volcano/scheduling.volcano.sh_podgroups.yaml" ] \
    && [ -f "$OUT/crds/volcano/bus.volcano.sh_commands.yaml" ] \
    && [ -f "$OUT/crds/coscheduling/scheduling.x-k8s.io_podgroups.yaml" ]
}
if complete && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi
# GPUSCHED_PEERS_NO_BUILD=1: only say where a complete cache is (a test that must not wait for a build).
[ -z "${GPUSCHED_PEERS_NO_BUILD:-}" ] || die "not built yet: $OUT (run tests/e2e/build-peers.sh)"

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.peers.lock"
flock 9
# Another run may have built it while this one waited for the lock.
if complete && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.peers-build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
NICE="${GPUSCHED_BUILD_NICE:-15}"
started=$(date +%s)
build() { # module dir, output name, package
  log "building $2 ($3)"
  (cd "$1" && CGO_ENABLED=0 nice -n "$NICE" go build -trimpath -ldflags "-s -w" -o "$TMP/$2" "$3") \
    || die "go build $3 failed"
}
build "$VC_MOD" vc-scheduler volcano.sh/volcano/cmd/scheduler
build "$VC_MOD" vc-controller-manager volcano.sh/volcano/cmd/controller-manager
build "$SP_MOD" sp-scheduler sigs.k8s.io/scheduler-plugins/cmd/scheduler
mkdir -p "$TMP/crds/volcano" "$TMP/crds/coscheduling"
VC_DIR="$(cd "$VC_MOD" && go list -m -f '{{.Dir}}' volcano.sh/volcano)"
SP_DIR="$(cd "$SP_MOD" && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)"
# All of Volcano's CRDs, as its install has them: besides PodGroup and Queue, the scheduler waits for its
# Numatopology and HyperNode informers to sync and the queue controller for its Command informer.
cp "$VC_DIR"/config/crd/volcano/bases/*.yaml "$TMP/crds/volcano/"
cp "$SP_DIR/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" "$TMP/crds/coscheduling/"
chmod -R u+w "$TMP/crds"
printf 'volcano %s\nscheduler-plugins %s\nkubernetes v1.34.4\nseconds %s\n' "$VOLCANO_VERSION" "$SP_VERSION" \
  "$(( $(date +%s) - started ))" >"$TMP/BUILD_INFO"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "built in $(( $(date +%s) - started ))s: $OUT"
echo "$OUT"
