#!/usr/bin/env bash
# Fetch the CRDs of the workload projects the suite has no controller for (Kubeflow TrainJob and PyTorchJob, KubeRay
# RayCluster, MPIJob), and NodeResourceTopology (what NFD's topology-updater publishes; tests/e2e/test_numa_e2e.py
# plays the agent) from their Go modules, at the versions pinned in tests/e2e/workload-crds/go.mod, plus the
# JobSet CRD (a TrainJob's child) from the JobSet version pinned in tests/e2e/controllers/go.mod. Only these modules
# are downloaded (`go mod download <module>@<version>`, no dependencies), and each zip's hash must match go.sum.
#
# Output goes to a cache outside the repository, reused when present:
#   ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}/workload-crds-<tag>/
#     crds/        one YAML file per CRD, ready for `kubectl apply --server-side -f`
#     VERSIONS     module, version and source path of each file
# stdout: exactly one line, that directory. stderr: progress and errors.
# Time on the shared 2-core box: 3 s with an empty module cache (about 50 MB unpacked), nothing when the cache
# directory is complete.
set -euo pipefail

log() { printf 'fetch-workload-crds: %s\n' "$*" >&2; }
die() { printf 'fetch-workload-crds: ERROR: %s\n' "$*" >&2; exit 1; }

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/workload-crds"
CONTROLLERS="$HERE/controllers"

modver() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$2/go.mod"; }

# module | go.mod dir | files inside the module (the training-operator's MPIJob CRD is left out on purpose: it is
# the old kubeflow.org/v1 MPIJob under the same name, mpijobs.kubeflow.org, as mpi-operator's v2beta1 one).
SOURCES=(
  "github.com/kubeflow/trainer/v2|$MOD|manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml"
  "github.com/kubeflow/training-operator|$MOD|manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
  "github.com/ray-project/kuberay/ray-operator|$MOD|config/crd/bases/ray.io_rayclusters.yaml"
  "github.com/kubeflow/mpi-operator|$MOD|manifests/base/kubeflow.org_mpijobs.yaml"
  "sigs.k8s.io/jobset|$CONTROLLERS|config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
  "github.com/k8stopologyawareschedwg/noderesourcetopology-api|$MOD|manifests/crd.yaml"
)

# Bump when this script changes what it produces.
RECIPE_VERSION=2
pins=""
for src in "${SOURCES[@]}"; do
  IFS='|' read -r mod dir files <<<"$src"
  ver="$(modver "$mod" "$dir")"
  [ -n "$ver" ] || die "no version of $mod in $dir/go.mod"
  pins+="$mod $ver $files"$'\n'
done
HASH="$( { echo "recipe=$RECIPE_VERSION"; printf '%s' "$pins"; cat "$MOD/go.sum"; } | sha256sum | cut -c1-10)"
CACHE_ROOT="${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched}"
OUT="$CACHE_ROOT/workload-crds-$HASH"
if [ -f "$OUT/VERSIONS" ] && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "Go toolchain not found in PATH (needed to fetch the CRDs from their modules)"
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.workload-crds.lock"
flock 9
if [ -f "$OUT/VERSIONS" ] && [ -z "${GPUSCHED_FORCE_BUILD:-}" ]; then
  echo "$OUT"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.workload-crds.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/crds" "$TMP/work"
started=$(date +%s)
while read -r mod ver files; do
  [ -n "$mod" ] || continue
  log "downloading $mod@$ver"
  # From an empty directory: outside any module, `go mod download m@v` fetches that one module and nothing else.
  json="$(cd "$TMP/work" && GOFLAGS=-mod=mod nice -n "${GPUSCHED_BUILD_NICE:-15}" go mod download -json "$mod@$ver")" \
    || die "go mod download $mod@$ver failed: $json"
  dir="$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  sum="$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')"
  [ -n "$dir" ] && [ -d "$dir" ] || die "go mod download $mod@$ver printed no Dir: $json"
  grep -qxF "$mod $ver $sum" "$MOD/go.sum" "$CONTROLLERS/go.sum" 2>/dev/null \
    || die "$mod@$ver: zip hash $sum is not the one in go.sum"
  for f in $files; do
    [ -f "$dir/$f" ] || die "$mod@$ver has no $f in its module zip"
    cp "$dir/$f" "$TMP/crds/"
    printf '%s %s %s\n' "$mod" "$ver" "$f" >>"$TMP/VERSIONS"
  done
done <<<"$pins"
rm -rf "$TMP/work"
chmod -R u+w "$TMP"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "fetched in $(( $(date +%s) - started ))s: $OUT"
echo "$OUT"
