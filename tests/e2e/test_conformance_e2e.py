"""A fast subset of Kubernetes' own scheduling e2e tests, run against kube-scheduler and against gpusched.

tests/conformance/run.py runs the specs of Kubernetes' e2e.test (built by tests/conformance/build-e2e.sh) on two
identical local clusters, one scheduled by kube-scheduler and one by ``gpusched run --scheduler-name
default-scheduler``; ``make conformance`` runs all of ``[sig-scheduling]`` and writes docs/conformance.md. Here
the runner takes the handful of quick SchedulerPredicates specs (``--subset fast``), so that a change that breaks
what kube-scheduler does for everyday pods fails ``make test``, not only the long comparison.

Skipped (failed under ``GPUSCHED_E2E_REQUIRED=1``) when the control-plane binaries, the e2e.test binary or
``gpusched run`` are missing, as the rest of the suite is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from localcluster import cached_binaries

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "conformance" / "run.py"
_spec = importlib.util.spec_from_file_location("conformance_run", RUNNER)
assert _spec is not None and _spec.loader is not None
conformance = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = conformance  # its dataclasses look their module up there
_spec.loader.exec_module(conformance)


def _required() -> bool:
    return os.environ.get("GPUSCHED_E2E_REQUIRED", "") not in ("", "0")


def _skip_or_fail(reason: str) -> None:
    if _required():
        pytest.fail(f"GPUSCHED_E2E_REQUIRED=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def test_gpusched_passes_the_fast_scheduling_e2e_tests_that_kube_scheduler_passes(
    tmp_path: Path, gpusched_missing: str | None
) -> None:
    if os.environ.get("GPUSCHED_E2E_KUBECONFIG"):
        pytest.skip("the comparison starts two local clusters of its own; GPUSCHED_E2E_KUBECONFIG names another one")
    if gpusched_missing is not None:
        _skip_or_fail(f"`gpusched run` is not available in this checkout ({gpusched_missing})")
    if cached_binaries() is None and not _required():
        pytest.skip("control-plane binaries not built: run tests/e2e/build-controlplane.sh")
    e2e_test = conformance.cached_e2e_test()
    if e2e_test is None and not _required():
        pytest.skip("Kubernetes' e2e.test not built: run tests/conformance/build-e2e.sh (see docs/conformance.md)")

    results = tmp_path / "results.json"
    argv = [sys.executable, str(RUNNER), "--subset=fast", f"--out={tmp_path / 'run'}", f"--json={results}"]
    if e2e_test is not None:
        argv.append(f"--e2e-test={e2e_test}")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)
    if proc.returncode == 2:
        pytest.fail(f"the conformance runner could not compare the schedulers:\n{proc.stderr[-4000:]}", pytrace=False)

    got = json.loads(results.read_text())
    kube_scheduler = {n for n, r in got["kube-scheduler"].items() if r["status"] == "passed"}
    # The comparison means something only if kube-scheduler passed the subset on this cluster.
    assert len(kube_scheduler) == 4, f"kube-scheduler passed {sorted(kube_scheduler)}:\n{proc.stderr[-4000:]}"
    details = (tmp_path / "run" / "gpusched-failures.md").read_text()
    assert got["regressions"] == [], f"gpusched fails what kube-scheduler passes:\n{details}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
