"""Fixtures of the end-to-end suite: one cluster per session, one clean namespace and set of nodes per scenario.

The cluster is a :class:`localcluster.LocalCluster` (etcd, kube-apiserver, controller manager and kwok on
loopback), or the existing cluster named by ``GPUSCHED_E2E_KUBECONFIG`` (kind or k3d with kwok installed, see
docs/e2e.md). Either way the session applies crds/ and creates the namespace ``gpusched-system`` for the
leader-election Lease.

When the control-plane binaries are not built, or ``gpusched run`` does not exist in this checkout, the tests
skip with the reason, unless ``GPUSCHED_E2E_REQUIRED=1`` (CI): then LocalCluster builds the binaries, and what
is missing fails the tests instead.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.localcluster import LocalCluster, cached_binaries
from tests.e2e.skips import required, skip_or_fail

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def kube() -> Iterator[kube_mod.Kube]:
    """The cluster of the session, with the CRDs applied and ``gpusched-system`` created."""
    external = os.environ.get("GPUSCHED_E2E_KUBECONFIG")
    started = time.monotonic()
    if external:
        k = kube_mod.Kube.of_kubeconfig(external, context=os.environ.get("GPUSCHED_E2E_CONTEXT") or None)
        k.apply_crds()
        k.ensure_namespace(kube_mod.SYSTEM_NAMESPACE)
        print(f"\n[e2e] using the cluster of {external} at {k.server}")
        yield k
        return
    bin_dir = cached_binaries()
    if bin_dir is None and not required():
        pytest.skip(
            "control-plane binaries not built: run tests/e2e/build-controlplane.sh (about 10-20 min, needs Go), "
            "set GPUSCHED_E2E_BIN, or point GPUSCHED_E2E_KUBECONFIG at a kind/k3d cluster; with "
            "GPUSCHED_E2E_REQUIRED=1 the suite builds them and fails instead of skipping"
        )
    with LocalCluster(bin_dir=bin_dir) as cluster:
        k = kube_mod.Kube.of_local(cluster)
        k.apply_crds()
        k.ensure_namespace(kube_mod.SYSTEM_NAMESPACE)
        print(f"\n[e2e] local control plane and CRDs ready in {time.monotonic() - started:.1f}s")
        yield k


@pytest.fixture(scope="session")
def gpusched_missing() -> str | None:
    """Why ``gpusched run`` cannot be started from this checkout, or None when it can."""
    return kube_mod.gpusched_run_available()


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    path = kube_mod.scenario_workdir()
    yield path
    if os.environ.get("GPUSCHED_E2E_KEEP") != "1":
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"\n[e2e] keeping scheduler configs and logs in {path}")


def _scenario_name(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    return name[:50].rstrip("-")


@pytest.fixture
def scenario(kube: kube_mod.Kube, workdir: Path, request: pytest.FixtureRequest) -> Iterator[kube_mod.Scenario]:
    """A namespace of its own for one test; its pods, nodes, queues and schedulers go when the test ends."""
    name = _scenario_name(request)
    s = kube_mod.Scenario(kube=kube, name=name, namespace=f"e2e-{name}"[:63].rstrip("-"), workdir=workdir)
    kube.ensure_namespace(s.namespace, {kube_mod.OWNER_LABEL: name})
    if kube.local is None:
        # A cluster with the ServiceAccount admission plugin (kind, k3d) refuses pods until the namespace's
        # default ServiceAccount exists.
        kube_mod.wait_until(
            lambda: kube.request("GET", f"/api/v1/namespaces/{s.namespace}/serviceaccounts/default"),
            timeout=30,
            what=f"ServiceAccount default in {s.namespace}",
        )
    try:
        yield s
    finally:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for replica in s.schedulers:
                print(f"\n----- {replica.identity}: {replica.log_path} -----\n{replica.log_tail(60)}", file=sys.stderr)
        s.cleanup()


@pytest.fixture
def sched(scenario: kube_mod.Scenario, gpusched_missing: str | None) -> kube_mod.Scenario:
    """A scenario whose test runs ``gpusched run``: skips (or fails under GPUSCHED_E2E_REQUIRED=1) without it."""
    if gpusched_missing is not None:
        skip_or_fail(f"`gpusched run` is not available in this checkout ({gpusched_missing})")
    return scenario


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    # Keep each phase's report on the item so that the scenario fixture knows whether the test failed.
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
