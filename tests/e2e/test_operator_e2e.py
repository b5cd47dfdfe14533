"""`gpusched run` as users run it, against a real kube-apiserver (LocalCluster: etcd, apiserver, controller
manager, kwok): a GPU pod with ``schedulerName: gpusched`` gets bound by the operator, run as shipped (the
ServiceAccount's token, the RBAC of manifests/), and goes Running.

Skipped when the control-plane binaries are not built, unless ``GPUSCHED_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.localcluster import GPU_RESOURCE, APIError, LocalCluster, cached_binaries, free_port, wait_for
from tests.e2e.skips import required

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.e2e

REPO = HERE.parent.parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    bin_dir = cached_binaries()
    if bin_dir is None and not required():
        pytest.skip("control-plane binaries not built (tests/e2e/build-controlplane.sh) and GPUSCHED_E2E_BIN unset")
    with LocalCluster(bin_dir=bin_dir) as c:
        c.kubectl("apply", "-f", str(REPO / "crds"))  # plain manifests: crds/Kustomization is skipped
        for crd in ("podgroups", "queues", "topologies"):
            c.kubectl("wait", "--for=condition=established", "--timeout=60s", f"crd/{crd}.scheduling.gpusched.io")
        c.request("POST", "/api/v1/namespaces", {"metadata": {"name": "gpusched-system"}})
        yield c


@pytest.fixture(scope="module")
def shipped_kubeconfig(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig with the token of the ServiceAccount manifests/ ship, whose RBAC is applied here."""
    kube = kube_mod.Kube.of_local(cluster)
    kube.apply_shipped_rbac()
    return kube.service_account_kubeconfig(tmp_path_factory.mktemp("shipped") / "gpusched.kubeconfig")


@contextlib.contextmanager
def _queue_reader_token(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A file holding the token of a ServiceAccount of ``namespace`` that may ``get`` Queues (the right ``gpusched
    explain queue/NAME`` needs); its ClusterRole and binding are removed at the end."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    name = f"{namespace}-queue-reader"
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "reader"}})
    rules = [{"apiGroups": ["scheduling.gpusched.io"], "resources": ["queues"], "verbs": ["get"]}]
    try:
        cluster.request("POST", f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": rules})
        cluster.request(
            "POST",
            f"{rbac}/clusterrolebindings",
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
        )
        answer = cluster.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/reader/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
        )
        path = tmp_path / "reader.token"
        path.write_text(answer["status"]["token"])
        yield path
    finally:
        for kind in ("clusterrolebindings", "clusterroles"):
            with contextlib.suppress(APIError):
                cluster.request("DELETE", f"{rbac}/{kind}/{name}")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


@contextlib.contextmanager
def _gpusched_run(
    cluster: LocalCluster, tmp_path: Path, *extra: str, kubeconfig: Path
) -> Iterator[tuple[int, int, Path]]:
    """``gpusched run`` on ``cluster`` with ``kubeconfig``'s credentials and ``extra`` arguments: (health port,
    metrics port, its log file)."""
    health, metrics = free_port(), free_port()
    path = tmp_path / "gpusched.log"
    log = path.open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--health-port",
            str(health),
            "--metrics-port",
            str(metrics),
            "--log-format",
            "json",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    try:
        yield health, metrics, path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        print(path.read_text()[-4000:])


@pytest.fixture
def operator(cluster: LocalCluster, shipped_kubeconfig: Path, tmp_path: Path) -> Iterator[tuple[int, int]]:
    with _gpusched_run(cluster, tmp_path, kubeconfig=shipped_kubeconfig) as (health, metrics, log):
        wait_for(lambda: _get(f"http://127.0.0.1:{health}/leader") == (200, "leader"), 60, "gpusched leads")
        wait_for(lambda: _get(f"http://127.0.0.1:{health}/readyz")[0] == 200, 60, "gpusched ready")
        yield health, metrics
        refused = [line for line in log.read_text().splitlines() if kube_mod.REFUSED.search(line)]
        assert not refused, f"the shipped RBAC refused gpusched: {refused}"


def test_gpu_pod_is_bound_by_gpusched_and_runs(cluster: LocalCluster, operator: tuple[int, int]) -> None:
    health, metrics = operator
    assert _get(f"http://127.0.0.1:{health}/healthz") == (200, "ok")
    cluster.create_fake_node("gpu-0", gpus=8)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/train:latest",
                    "resources": {"limits": {GPU_RESOURCE: "2"}, "requests": {"cpu": "1"}},
                }
            ],
        },
    }
    started = time.monotonic()
    cluster.request("POST", "/api/v1/namespaces/default/pods", pod)
    running = cluster.wait_pod_phase("default", "train", "Running", timeout=60)
    print(f"\n[e2e] pod created -> Running in {time.monotonic() - started:.2f}s")
    assert running["spec"]["nodeName"] == "gpu-0"
    assert len(running["metadata"]["annotations"]["gpusched.io/gpu-ids"].split(",")) == 2

    events = cluster.request("GET", "/api/v1/namespaces/default/events")["items"]
    scheduled = [e for e in events if e["involvedObject"]["name"] == "train" and e["reason"] == "Scheduled"]
    assert scheduled and "gpu-0" in scheduled[0]["message"]
    assert scheduled[0]["involvedObject"]["uid"] == running["metadata"]["uid"]

    text = _get(f"http://127.0.0.1:{metrics}/metrics")[1]
    assert 'gpusched_binds_total{result="bound"} 1.0' in text
    assert "gpusched_is_leader 1.0" in text

    lease = cluster.request("GET", "/apis/coordination.k8s.io/v1/namespaces/gpusched-system/leases/gpusched")
    assert lease["spec"]["holderIdentity"]
    assert json.dumps(lease)  # the Lease exists under gpusched's own name


def test_manifests_apply_on_a_real_api_server(cluster: LocalCluster) -> None:
    text = cluster.kubectl("apply", "--dry-run=server", "-k", str(REPO / "manifests")).stdout
    for created in (
        "namespace/gpusched-system",
        "serviceaccount/gpusched",
        "clusterrole.rbac.authorization.k8s.io/gpusched",
        "role.rbac.authorization.k8s.io/gpusched-leader-election",
        "deployment.apps/gpusched",
        "poddisruptionbudget.policy/gpusched",
        "service/gpusched-metrics",
        "networkpolicy.networking.k8s.io/gpusched",
    ):
        assert created in text


def test_a_missing_lease_namespace_is_named_and_readiness_says_it_cannot_lead(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """``gpusched run --namespace no-such-ns`` used to reach "cache warm" and idle silently, ready and never
    leading. Now it names the namespace in an error line and is not ready until the namespace exists; then it
    leads without a restart, publishes where its explain answers on the Lease, and ``gpusched explain`` (no
    scheduler pod in the cluster) finds it there."""
    ns = "gpusched-e2e-missing"
    # Admin: the shipped Role grants the Lease in gpusched-system only, so the ServiceAccount would be refused in
    # any other namespace (403) before the API server could say that this one does not exist (404).
    admin = cluster.kubeconfig
    with _gpusched_run(cluster, tmp_path, "--namespace", ns, "--bind-address", "127.0.0.1", kubeconfig=admin) as (
        health,
        _,
        log,
    ):
        readyz = f"http://127.0.0.1:{health}/readyz"
        wait_for(lambda: _get(readyz)[0] == 503 and "cannot lead" in _get(readyz)[1], 90, "readyz says why")
        text = _get(readyz)[1]
        assert text.startswith(f"not leading and cannot lead: namespace {ns} does not exist"), text
        assert f"kubectl create namespace {ns}" in text
        assert _get(f"http://127.0.0.1:{health}/leader") == (503, text)
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        refused = [line for line in lines if line.get("event") == "cannot lead"]
        assert len(refused) == 1 and refused[0]["level"] == "error", refused
        assert f'namespaces "{ns}" not found' in refused[0]["reason"]  # the API server's own words

        cluster.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        wait_for(lambda: _get(f"http://127.0.0.1:{health}/leader") == (200, "leader"), 30, "gpusched leads")
        assert _get(readyz) == (200, "ready")
        lease = cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/gpusched")
        assert lease["metadata"]["annotations"]["gpusched.io/explain-url"] == f"http://127.0.0.1:{health}"

        # The admin kubeconfig authenticates with a client certificate: no token to pass on, so a ServiceAccount's.
        with _queue_reader_token(cluster, ns, tmp_path) as token_file:
            explained = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "scheduler.cli",
                    "explain",
                    "queue/default",
                    "--kubeconfig",
                    str(cluster.kubeconfig),
                    "--token-file",
                    str(token_file),
                    "--scheduler-namespace",
                    ns,
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=60,
            )
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith("queue default"), explained.stdout
    # stderr says who answered and nothing else (no log line).
    assert explained.stderr.strip().splitlines() == [explained.stderr.strip()], explained.stderr
    assert f"http://127.0.0.1:{health}" in explained.stderr and "answered by" in explained.stderr
