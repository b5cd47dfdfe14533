"""Workloads as users submit them, through real controllers: each becomes one gang without a hand-written PodGroup.

The Job controller runs in the suite's kube-controller-manager; JobSet and LeaderWorkerSet run from the binaries
``build-workload-controllers.sh`` builds (their CRDs from the same modules), started here against the same API
server with leader election and cert management off. Their admission webhooks are not registered with the API
server (no cert-manager, no Service to reach them): JobSet's webhook server still starts (it cannot be switched
off), on a self-signed certificate nobody calls; LeaderWorkerSet's is off (``ENABLE_WEBHOOKS=false``). The
workloads are submitted as the projects' docs show them, with ``schedulerName: gpusched`` added; kwok runs and
completes the pods. The garbage collector of the controller-manager deletes the PodGroup with its workload.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kube as kube_mod
import pytest
from kube import Kube, Scenario, node_of
from localcluster import APIError

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
GROUPS = "/apis/scheduling.gpusched.io/v1alpha1/namespaces/{ns}/podgroups"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _self_signed(directory: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _controllers_dir() -> Path | None:
    given = os.environ.get("GPUSCHED_E2E_CONTROLLERS")
    if given:
        return Path(given)
    try:
        out = subprocess.run(
            [str(HERE / "build-workload-controllers.sh")], capture_output=True, text=True, check=True, timeout=1800
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return None
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def controllers(kube: Kube) -> Iterator[Path | None]:
    """JobSet and LeaderWorkerSet controllers running against the suite's cluster (None: not built here)."""
    out = _controllers_dir() if kube.local is not None else None
    if out is None:
        yield None
        return
    kube.kubectl("apply", "--server-side", "-f", str(out / "crds"))
    tmp = Path(tempfile.mkdtemp(prefix="gpusched-controllers-"))
    _self_signed(tmp / "certs")
    procs: list[subprocess.Popen[bytes]] = []
    for name, api, env in (
        ("jobset", "config.jobset.x-k8s.io/v1alpha1", {}),
        ("lws", "config.lws.x-k8s.io/v1alpha1", {"ENABLE_WEBHOOKS": "false"}),
    ):
        config = tmp / f"{name}.yaml"
        config.write_text(
            f"apiVersion: {api}\nkind: Configuration\nleaderElection: {{leaderElect: false}}\n"
            f"internalCertManagement: {{enable: false}}\n"
            f"webhook: {{port: {_free_port()}, certDir: {tmp / 'certs'}}}\n"
            f"metrics: {{bindAddress: '0'}}\nhealth: {{healthProbeBindAddress: '127.0.0.1:{_free_port()}'}}\n"
        )
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(
            subprocess.Popen(
                [str(out / f"{name}-controller"), f"--kubeconfig={kube.kubeconfig}", f"--config={config}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
            )
        )
    time.sleep(2)
    try:
        for proc in procs:
            assert proc.poll() is None, f"a controller exited at start: see {tmp}/*.log"
        yield out
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _podgroups(s: Scenario) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = s.kube.request("GET", GROUPS.format(ns=s.namespace)).get("items", [])
    return items


def _one_gang(s: Scenario, min_member: int, owner_kind: str, timeout: float = 60.0) -> dict[str, Any]:
    groups = kube_mod.wait_until(lambda: _podgroups(s), timeout=timeout, what=f"a PodGroup for the {owner_kind}")
    assert len(groups) == 1, [g["metadata"]["name"] for g in groups]
    group = groups[0]
    assert group["spec"]["minMember"] == min_member, group["spec"]
    owner = group["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["controller"]) == (owner_kind, True)
    return group


def _bound_together(s: Scenario, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Wait until ``count`` pods are bound; none may have been bound while fewer than ``count`` existed."""

    def bound() -> list[dict[str, Any]] | None:
        pods = [p for p in s.pods() if node_of(p)]
        return pods if len(pods) >= count else None

    pods: list[dict[str, Any]] = kube_mod.wait_until(bound, timeout=timeout, what=f"{count} pods bound")
    return pods


def _gone(s: Scenario, path: str, group: str) -> None:
    s.kube.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})

    def deleted() -> bool:
        try:
            s.kube.request("GET", GROUPS.format(ns=s.namespace) + "/" + group)
        except APIError as exc:
            return exc.status == 404
        return False

    kube_mod.wait_until(deleted, timeout=60, what=f"PodGroup {group} garbage-collected with its workload")


def _cpu_nodes(s: Scenario, count: int = 2) -> None:
    s.add_nodes([kube_mod.gpu_node(f"{s.name[:40]}-n{i}", rack=f"r{i % 2}") for i in range(count)])


def test_an_indexed_job_is_one_gang_that_lands_whole_completes_and_takes_its_podgroup_along(sched: Scenario) -> None:
    _cpu_nodes(sched)
    sched.start_gpusched()
    # kubernetes.io/docs/tasks/job/indexed-parallel-processing-static/, with schedulerName added.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed-job"},
        "spec": {
            "completions": 5,
            "parallelism": 3,
            "completionMode": "Indexed",
            "template": {
                "spec": {
                    "schedulerName": "gpusched",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "docker.io/library/busybox",
                            "command": ["rev", "/input/data.txt"],
                        }
                    ],
                }
            },
        },
    }
    path = f"/apis/batch/v1/namespaces/{sched.namespace}/jobs"
    sched.kube.request("POST", path, job)
    group = _one_gang(sched, 3, "Job")
    assert group["metadata"]["name"] == "job-indexed-job"
    _bound_together(sched, 3)

    def complete() -> bool:
        status = sched.kube.request("GET", f"{path}/indexed-job").get("status") or {}
        return status.get("succeeded") == 5

    kube_mod.wait_until(complete, timeout=90, what="the Job's 5 completions (kwok completes Job pods)")
    _gone(sched, f"{path}/indexed-job", "job-indexed-job")


@pytest.mark.skip(
    reason="JobSet v0.12.0's controller panics without its defaulting webhook (nil spec.network, "
    "jobset_controller.go:1155 dnsHostnamesEnabled): the webhook must be registered with the API server "
    "(a MutatingWebhookConfiguration with clientConfig.url to 127.0.0.1 and the self-signed CA); not done yet"
)
def test_a_jobset_is_one_gang(sched: Scenario, controllers: Path | None) -> None:
    if controllers is None:
        pytest.skip("JobSet controller not built (tests/e2e/build-workload-controllers.sh) or not a local cluster")
    _cpu_nodes(sched)
    sched.start_gpusched()

    # jobset.sigs.k8s.io docs "simple" example, with schedulerName added.
    def rjob(name: str, replicas: int) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": 2,
                    "completions": 2,
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "schedulerName": "gpusched",
                            "containers": [
                                {"name": "sleep", "image": "busybox", "command": ["sleep"], "args": ["100s"]}
                            ],
                        }
                    },
                }
            },
        }

    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "simple"},
        "spec": {"replicatedJobs": [rjob("leader", 1), rjob("workers", 2)]},
    }
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{sched.namespace}/jobsets"
    sched.kube.request("POST", path, jobset)
    group = _one_gang(sched, 6, "JobSet")
    assert group["metadata"]["name"] == "jobset-simple"
    _bound_together(sched, 6)

    def completed() -> bool:
        conditions = (sched.kube.request("GET", f"{path}/simple").get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Completed" and c.get("status") == "True" for c in conditions)

    kube_mod.wait_until(completed, timeout=120, what="the JobSet Completed")
    _gone(sched, f"{path}/simple", "jobset-simple")


@pytest.mark.skip(
    reason="not run yet: LeaderWorkerSet v0.9.0 runs with ENABLE_WEBHOOKS=false, and whether its controller needs the "
    "defaulting webhook (as JobSet's does) and the DisaggregatedSet CRD was not checked"
)
def test_a_leaderworkerset_is_one_gang_per_group(sched: Scenario, controllers: Path | None) -> None:
    if controllers is None:
        pytest.skip("LeaderWorkerSet controller not built (tests/e2e/build-workload-controllers.sh)")
    _cpu_nodes(sched)
    sched.start_gpusched()
    # lws.sigs.k8s.io docs example (config/samples), with schedulerName added to both templates.
    template = {
        "spec": {
            "schedulerName": "gpusched",
            "containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 8080}]}],
        }
    }
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "leaderworkerset-sample"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {"size": 3, "leaderTemplate": template, "workerTemplate": template},
        },
    }
    path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{sched.namespace}/leaderworkersets"
    sched.kube.request("POST", path, lws)

    def two() -> list[dict[str, Any]] | None:
        groups = _podgroups(sched)
        return groups if len(groups) >= 2 else None

    groups = kube_mod.wait_until(two, timeout=60, what="two PodGroups (one per group)")
    assert sorted(g["metadata"]["name"] for g in groups) == [
        "leaderworkerset-leaderworkerset-sample-0",
        "leaderworkerset-leaderworkerset-sample-1",
    ]
    assert {g["spec"]["minMember"] for g in groups} == {3}
    pods = _bound_together(sched, 6, timeout=90)
    assert len(pods) == 6
    sched.kube.request("DELETE", f"{path}/leaderworkerset-sample")
    kube_mod.wait_until(lambda: not _podgroups(sched), timeout=60, what="both PodGroups garbage-collected")
