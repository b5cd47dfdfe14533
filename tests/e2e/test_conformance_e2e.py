"""A fast subset of Kubernetes' own scheduling e2e tests, run against kube-scheduler and against gpusched.

tests/conformance/run.py runs the specs of Kubernetes' e2e.test (built by tests/conformance/build-e2e.sh) on two
identical local clusters, one scheduled by kube-scheduler and one by ``gpusched run --scheduler-name
default-scheduler``; ``make conformance`` runs all of ``[sig-scheduling]`` and writes docs/conformance.md. Here
the runner takes the handful of quick SchedulerPredicates specs (``--subset fast``), so that a change that breaks
what kube-scheduler does for everyday pods fails ``make test``, not only the long comparison.

e2e.test is built here (tests/conformance/build-e2e.sh, into the cache) when it is not there yet, as .ci/run
builds it. Skipped (failed under ``GPUSCHED_E2E_REQUIRED=1``) when the control-plane binaries or ``gpusched run``
are missing, or e2e.test is missing with no Go to build it, as the rest of the suite is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance import run as conformance
from tests.e2e.localcluster import cached_binaries
from tests.e2e.skips import made_by, required, skip_or_fail

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BUILD_E2E = ROOT / "tests" / "conformance" / "build-e2e.sh"


def _e2e_test() -> Path:
    """Kubernetes' e2e.test: ``$GPUSCHED_E2E_TEST`` or the cache, else built now by build-e2e.sh, the script .ci/run
    builds it with (2.5-5.3 min from a cold Go cache, docs/conformance.md), so that ``make test`` on a fresh clone
    runs this test as CI does."""
    found = conformance.cached_e2e_test()
    if found is not None:
        return found
    if shutil.which("go") is None:
        skip_or_fail(
            "Kubernetes' e2e.test is not built and there is no Go to build it: install Go >= 1.26, or run "
            "tests/conformance/build-e2e.sh where there is one and set GPUSCHED_E2E_TEST (docs/conformance.md)"
        )
    return made_by(BUILD_E2E, failed="failed", timeout=3600)


def test_gpusched_passes_the_fast_scheduling_e2e_tests_that_kube_scheduler_passes(
    tmp_path: Path, gpusched_missing: str | None
) -> None:
    if os.environ.get("GPUSCHED_E2E_KUBECONFIG"):
        pytest.skip("the comparison starts two local clusters of its own; GPUSCHED_E2E_KUBECONFIG names another one")
    if gpusched_missing is not None:
        skip_or_fail(f"`gpusched run` is not available in this checkout ({gpusched_missing})")
    if cached_binaries() is None and not required():
        pytest.skip("control-plane binaries not built: run tests/e2e/build-controlplane.sh")
    e2e_test = _e2e_test()

    results = tmp_path / "results.json"
    argv = [
        sys.executable,
        "-m",
        "tests.conformance.run",
        "--subset=fast",
        f"--out={tmp_path / 'run'}",
        f"--json={results}",
    ]
    argv.append(f"--e2e-test={e2e_test}")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False, cwd=ROOT)
    if proc.returncode == 2:
        pytest.fail(f"the conformance runner could not compare the schedulers:\n{proc.stderr[-4000:]}", pytrace=False)

    got = json.loads(results.read_text())
    kube_scheduler = {n for n, r in got["kube-scheduler"].items() if r["status"] == "passed"}
    # The comparison means something only if kube-scheduler passed the subset on this cluster.
    assert len(kube_scheduler) == 4, f"kube-scheduler passed {sorted(kube_scheduler)}:\n{proc.stderr[-4000:]}"
    details = (tmp_path / "run" / "gpusched-failures.md").read_text()
    assert got["regressions"] == [], f"gpusched fails what kube-scheduler passes:\n{details}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
