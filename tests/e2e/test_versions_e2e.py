"""gpusched on a real API server that does not serve ``resource.k8s.io/v1`` (a cluster as before Kubernetes 1.34; in
1.36 the group's beta and alpha versions are off by default, so the whole group is gone): it becomes ready, leads,
binds a device-plugin GPU pod, says once that DRA is off, and a pod with a ResourceClaim is told why it waits.

A local control plane of its own (``--runtime-config=resource.k8s.io/v1=false``), as the session's cluster serves
the API; without the Node authorizer, which in 1.36 watches ResourceSlices (DRA's feature gate is locked on) and keeps
the API server from ever being ready without them. A real older minor (1.33, where the gate is off) is not run yet.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.localcluster import GPU_RESOURCE, APIError, LocalCluster, cached_binaries, free_port, wait_for
from tests.e2e.skips import required

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.e2e

REPO = HERE.parent.parent
DRA = "resource.k8s.io/v1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    bin_dir = cached_binaries()
    if bin_dir is None and not required():
        pytest.skip("control-plane binaries not built (tests/e2e/build-controlplane.sh) and GPUSCHED_E2E_BIN unset")
    with LocalCluster(bin_dir=bin_dir, disabled_apis=(DRA,), node_authorizer=False) as c:
        c.kubectl("apply", "-f", str(REPO / "crds"))
        for crd in ("podgroups", "queues", "topologies"):
            c.kubectl("wait", "--for=condition=established", "--timeout=60s", f"crd/{crd}.scheduling.gpusched.io")
        c.request("POST", "/api/v1/namespaces", {"metadata": {"name": "gpusched-system"}})
        yield c


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


@contextlib.contextmanager
def gpusched_run(cluster: LocalCluster, tmp_path: Path) -> Iterator[tuple[int, int, Path]]:
    """``gpusched run`` on ``cluster``: (health port, metrics port, its JSON log)."""
    health, metrics = free_port(), free_port()
    path = tmp_path / "gpusched.log"
    with path.open("w") as log:
        command = [sys.executable, "-m", "scheduler.cli", "run", "--kubeconfig", str(cluster.kubeconfig)]
        command += ["--health-port", str(health), "--metrics-port", str(metrics), "--log-format", "json"]
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            yield health, metrics, path
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(path.read_text()[-4000:])


def gpu_pod(name: str, *, claim: str = "") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/train:latest"}
    spec: dict[str, Any] = {"schedulerName": "gpusched", "containers": [container]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
        container["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]}
    else:
        container["resources"] = {"limits": {GPU_RESOURCE: "2"}, "requests": {"cpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def scheduling_message(cluster: LocalCluster, name: str) -> str:
    conditions = cluster.get_pod("default", name).get("status", {}).get("conditions") or []
    return next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")


def test_without_the_dra_api_gpusched_binds_gpu_pods_and_says_dra_is_off(cluster: LocalCluster, tmp_path: Path) -> None:
    with pytest.raises(APIError) as absent:
        cluster.request("GET", f"/apis/{DRA}")
    assert absent.value.status == 404  # the API really is absent

    with gpusched_run(cluster, tmp_path) as (health, metrics, log):
        wait_for(lambda: _get(f"http://127.0.0.1:{health}/leader") == (200, "leader"), 90, "gpusched leads")
        wait_for(lambda: _get(f"http://127.0.0.1:{health}/readyz")[0] == 200, 60, "gpusched ready")
        cluster.create_fake_node("gpu-0", gpus=8)
        cluster.request("POST", "/api/v1/namespaces/default/pods", gpu_pod("train"))
        running = cluster.wait_pod_phase("default", "train", "Running", timeout=60)
        assert running["spec"]["nodeName"] == "gpu-0"

        cluster.request("POST", "/api/v1/namespaces/default/pods", gpu_pod("claims", claim="claims-gpus"))
        wait_for(lambda: f"does not serve {DRA}" in scheduling_message(cluster, "claims"), 60, "the pod told why")
        message = scheduling_message(cluster, "claims")
        assert message.startswith("0/1 nodes are available: the cluster does not serve resource.k8s.io/v1"), message
        assert not cluster.get_pod("default", "claims")["spec"].get("nodeName")

        text = _get(f"http://127.0.0.1:{metrics}/metrics")[1]
        assert f'gpusched_api_available{{group_version="{DRA}"}} 0.0' in text
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    said = [line for line in lines if line.get("group_version") == DRA]
    assert [(line["level"], line["event"]) for line in said] == [("warning", "API not served; feature off")], said
    # Nothing of the API was listed or watched (an informer says "watch interrupted" when its listing fails).
    assert not [line for line in lines if line.get("kind") in ("deviceclasses", "resourceslices", "resourceclaims")]
