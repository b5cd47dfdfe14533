#!/usr/bin/env bash
# Build the local Kubernetes control plane used by the gpusched e2e tests:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok,
# at the versions pinned in tests/e2e/controlplane/go.mod.
#
#   build-controlplane.sh          the control plane of the suite (Kubernetes 1.36)
#   build-controlplane.sh older    only kube-apiserver of the older minor pinned in tests/e2e/controlplane-older/
#                                  (1.33: no resource.k8s.io/v1), for test_versions_e2e.py; etcd and kwok are
#                                  the suite's (docs/e2e.md: "An older Kubernetes minor")
#
# Binaries go to a cache outside the repository:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/bin-<version-tag>/
# and are reused when present, so a second run is a fast no-op.
#
# stdout: exactly one line, the binary directory (BIN=$(tests/e2e/build-controlplane.sh)).
# stderr: progress, timings, errors; while another build of the same binaries holds the lock, a line a minute
# saying so.
#
# Environment:
#   GPUSCHED_E2E_CACHE   cache root (default $HOME/.cache/gpusched)
#   GPUSCHED_BUILD_NICE  nice level for go build (default 15)
#   GPUSCHED_FORCE_BUILD=1  rebuild even if cached
#   GPUSCHED_BUILD_REPORT  a file to write what happened to: "built SECONDS", "cached", or "waited SECONDS"
#                          (another build made the binaries while this one waited; nothing built here)
set -euo pipefail

log() { printf 'build-controlplane: %s\n' "$*" >&2; }
report() { if [ -n "${GPUSCHED_BUILD_REPORT:-}" ]; then printf '%s\n' "$*" >"$GPUSCHED_BUILD_REPORT"; fi; }
die() { printf 'build-controlplane: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  "") WHAT=controlplane ;;
  older) WHAT=controlplane-older ;;
  *) die "unknown argument '$1' (none, or 'older')" ;;
esac
MOD="$HERE/$WHAT"
[ -f "$MOD/go.mod" ] || die "missing $MOD/go.mod"

command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (need Go >= 1.26, see tests/e2e/README.md)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"

modver() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$MOD/go.mod"; }
K8S_VERSION="$(modver k8s.io/kubernetes)"
if [ "$WHAT" = controlplane ]; then
  ETCD_VERSION="$(modver go.etcd.io/etcd/server/v3)"
  KWOK_VERSION="$(modver sigs.k8s.io/kwok)"
else
  ETCD_VERSION=none KWOK_VERSION=none
fi
[ -n "$K8S_VERSION" ] && [ -n "$ETCD_VERSION" ] && [ -n "$KWOK_VERSION" ] ||
  die "could not read pinned versions from $MOD/go.mod"

K8S_MAJOR="${K8S_VERSION#v}"; K8S_MAJOR="${K8S_MAJOR%%.*}"
K8S_MINOR="${K8S_VERSION#v*.}"; K8S_MINOR="${K8S_MINOR%%.*}"

# Version stamps the upstream release build would set (kubectl version,
# /version on the apiserver); without them the binaries report v0.0.0-master.
LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR"
  LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# kwok needs Stage definitions to move nodes to Ready and pods to Running. Use
# the "fast" set that kwokctl uses, taken from the pinned kwok module.
KWOK_STAGES=(
  node/fast/node-initialize.yaml
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  pod/fast/pod-ready.yaml
  pod/fast/pod-complete.yaml
  pod/fast/pod-delete.yaml
)
[ "$WHAT" = controlplane ] || KWOK_STAGES=()

# Bump when this script changes what it produces.
RECIPE_VERSION=2

# Everything that determines the binaries goes into the tag.
RECIPE_HASH="$(
  cd "$MOD" && {
    echo "recipe=$RECIPE_VERSION ${KWOK_STAGES[*]}"
    cat go.mod go.sum
    find . -name '*.go' -type f | LC_ALL=C sort | xargs cat
    printf '%s\n' "$LDFLAGS"
  } | sha256sum | cut -c1-10
)"
TAG="k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}-${RECIPE_HASH}"
[ "$WHAT" = controlplane ] || TAG="k8s-apiserver-${K8S_VERSION}-${RECIPE_HASH}"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
BIN="$CACHE_ROOT/bin-$TAG"

BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)
PKGS=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  ./cmd/etcd
  sigs.k8s.io/kwok/cmd/kwok
)
if [ "$WHAT" != controlplane ]; then
  BINARIES=(kube-apiserver)
  PKGS=(k8s.io/kubernetes/cmd/kube-apiserver)
fi

complete() {
  [ -f "$1/BUILD_INFO" ] || return 1
  [ "${#KWOK_STAGES[@]}" = 0 ] || [ -s "$1/kwok-stages.yaml" ] || return 1
  local b
  for b in "${BINARIES[@]}"; do [ -x "$1/$b" ] || return 1; done
}

if [ "${GPUSCHED_FORCE_BUILD:-0}" != 1 ] && complete "$BIN"; then
  log "cached, nothing to build: $BIN ($(grep -h '^build_seconds=' "$BIN/BUILD_INFO" || true))"
  report cached
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
# Serialise concurrent builds of the same tag.
LOCK="$CACHE_ROOT/.bin-$TAG.lock"
exec 9>"$LOCK"
if command -v flock >/dev/null 2>&1; then
  if ! flock -n 9; then
    WAIT_START=$(date +%s)
    log "another build of these binaries holds $LOCK; waiting for it (a cold build takes 10-20 minutes)"
    until flock -w 60 9; do
      log "still waiting for the other build: $(( $(date +%s) - WAIT_START )) s so far"
    done
    WAITED=$(( $(date +%s) - WAIT_START ))
    log "the other build released the lock after $WAITED s of waiting"
    if [ "${GPUSCHED_FORCE_BUILD:-0}" != 1 ] && complete "$BIN"; then
      log "the other build made the binaries; nothing built here: $BIN"
      report "waited $WAITED"
      echo "$BIN"
      exit 0
    fi
    log "the other build left no complete binaries; building them here"
  fi
fi

TMP="$(mktemp -d "$CACHE_ROOT/.bin-$TAG.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

log "building ${BINARIES[*]}: Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION with $(go version | awk '{print $3}')"
log "target: $BIN (this takes a while from a cold Go build cache; see tests/e2e/README.md)"
START=$(date +%s)
(
  cd "$MOD"
  # One go build for all packages so shared dependencies are compiled once.
  CGO_ENABLED=0 GOFLAGS=-mod=readonly nice -n "${GPUSCHED_BUILD_NICE:-15}" \
    go build -trimpath -ldflags "$LDFLAGS" -o "$TMP/" "${PKGS[@]}"
) || die "go build failed (see messages above); nothing was cached"
END=$(date +%s)

for b in "${BINARIES[@]}"; do
  [ -x "$TMP/$b" ] || die "go build succeeded but $b is missing from $TMP"
done
if [ "${#KWOK_STAGES[@]}" != 0 ]; then
  KWOK_DIR="$(cd "$MOD" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  [ -n "$KWOK_DIR" ] || die "cannot locate the sigs.k8s.io/kwok module directory"
  for f in "${KWOK_STAGES[@]}"; do
    [ -f "$KWOK_DIR/kustomize/stage/$f" ] || die "kwok stage $f not found in $KWOK_DIR"
    printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$KWOK_VERSION" "$f"
    cat "$KWOK_DIR/kustomize/stage/$f"
  done >"$TMP/kwok-stages.yaml"
fi

cat >"$TMP/BUILD_INFO" <<EOF
tag=$TAG
kubernetes=$K8S_VERSION
etcd=$ETCD_VERSION
kwok=$KWOK_VERSION
go=$(go version | awk '{print $3}')
built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
build_seconds=$((END - START))
EOF

rm -rf "$BIN"
mv "$TMP" "$BIN"
trap - EXIT
log "built in $((END - START))s: $BIN ($(du -sh "$BIN" 2>/dev/null | cut -f1))"
report "built $((END - START))"
echo "$BIN"
