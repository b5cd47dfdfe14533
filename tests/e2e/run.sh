#!/usr/bin/env bash
# Run the e2e suite (tests/e2e) if it can run here, and say plainly why when it cannot.
#
#   tests/e2e/run.sh [PYTEST ARGS...]        (make test and make e2e call it; arguments that name files under
#                                             tests/ run those alone)
#
# Where the cluster comes from, in this order:
#   GPUSCHED_E2E_KUBECONFIG   an existing cluster (kind, k3d) with kwok in it, see docs/e2e.md
#   GPUSCHED_E2E_BIN          a directory with the control-plane binaries
#   the cache                 binaries built earlier by build-controlplane.sh (~/.cache/gpusched/bin-...)
#   Go on PATH                build them now with build-controlplane.sh (10-20 min the first time)
# With none of these the suite is skipped (exit 0) with a message, unless GPUSCHED_E2E_REQUIRED=1 (CI): then
# that is an error.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
required() { [ -n "${GPUSCHED_E2E_REQUIRED:-}" ] && [ "${GPUSCHED_E2E_REQUIRED}" != 0 ]; }

if [ -n "${GPUSCHED_E2E_KUBECONFIG:-}" ]; then
  echo "e2e: running against the cluster of GPUSCHED_E2E_KUBECONFIG=$GPUSCHED_E2E_KUBECONFIG"
elif [ -z "${GPUSCHED_E2E_BIN:-}" ]; then
  cached="$("$PY" -c 'from tests.e2e import localcluster as l; print(l.cached_binaries() or "")')"
  if [ -n "$cached" ]; then
    export GPUSCHED_E2E_BIN="$cached"
    echo "e2e: control-plane binaries from the cache: $cached"
  elif command -v go >/dev/null 2>&1; then
    echo "e2e: no control-plane binaries in the cache yet: building them with $(go version)" \
      "(10-20 minutes the first time; about 400 MB in ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched})"
    started=$(date +%s)
    outcome="$(mktemp)"
    trap 'rm -f "$outcome"' EXIT
    GPUSCHED_E2E_BIN="$(GPUSCHED_BUILD_REPORT="$outcome" tests/e2e/build-controlplane.sh)"
    export GPUSCHED_E2E_BIN
    read -r what seconds <"$outcome" || true
    rm -f "$outcome"
    trap - EXIT
    case "${what:-}" in
      built) echo "e2e: built the control plane in ${seconds} s: $GPUSCHED_E2E_BIN" ;;
      waited) echo "e2e: another run built the control plane while this one waited ${seconds} s; nothing built" \
        "here: $GPUSCHED_E2E_BIN" ;;
      *) echo "e2e: control plane from the cache after $(( $(date +%s) - started )) s; nothing built here:" \
        "$GPUSCHED_E2E_BIN" ;;
    esac
  elif required; then
    echo "e2e: ERROR: GPUSCHED_E2E_REQUIRED=1, but there are no control-plane binaries and no Go to build them" >&2
    exit 1
  else
    echo "e2e: SKIPPED: no control-plane binaries in ${GPUSCHED_E2E_CACHE:-$HOME/.cache/gpusched} and no Go on PATH" \
      "to build them. Install Go >= 1.26, or set GPUSCHED_E2E_BIN or GPUSCHED_E2E_KUBECONFIG (docs/e2e.md)."
    exit 0
  fi
fi
# The suite, unless the arguments name test files or folders themselves (`run.sh tests/e2e/test_rbac_e2e.py`):
# pytest would run both, the named file and the whole suite.
for arg in "$@"; do
  case "$arg" in
    tests/*|./tests/*) exec "$PY" -m pytest -q "$@" ;;
  esac
done
exec "$PY" -m pytest -q tests/e2e "$@"
