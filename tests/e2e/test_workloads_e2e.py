"""Workloads as users submit them, through real controllers: each becomes one gang without a hand-written PodGroup.

The Job controller runs in the suite's kube-controller-manager; JobSet and LeaderWorkerSet run from the binaries
``build-workload-controllers.sh`` builds (their CRDs and webhook manifests from the same modules), started here
against the same API server with leader election and cert management off. Their admission webhooks are served on
127.0.0.1 with a certificate made here and registered with the API server (``webhooks.py``): JobSet's controller
needs its defaulting webhook (without ``spec.network`` it panics) and LeaderWorkerSet's pod webhook labels every pod
with its group, which is what the gang is keyed by. The workloads are submitted as the projects' docs show them,
with ``schedulerName: gpusched`` added; kwok runs the pods and completes those owned by a Job. The garbage
collector of the controller-manager deletes the PodGroup with its workload.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e import webhooks
from tests.e2e.kube import Kube, Scenario, node_of
from tests.e2e.localcluster import free_port
from tests.e2e.skips import made_by

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
LWS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"


def _controllers_dir() -> Path:
    """The built controllers: GPUSCHED_E2E_CONTROLLERS, or what build-workload-controllers.sh finds or builds."""
    given = os.environ.get("GPUSCHED_E2E_CONTROLLERS")
    if given:
        return Path(given)
    return made_by(HERE / "build-workload-controllers.sh", failed="failed", timeout=1800)


@dataclass(frozen=True)
class Controller:
    """One workload controller as the suite runs it, and how to tell that the API server calls its webhooks."""

    name: str  # the binary is <name>-controller, the webhook kustomization webhooks/<name>, the prefix <name>-
    config_api: str
    probe_path: str  # a dry-run create of probe here must come back defaulted by the mutating webhook
    probe: dict[str, Any]
    defaulted: Callable[[dict[str, Any]], bool]


def _probe_template() -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}


CONTROLLERS = (
    Controller(
        "jobset",
        "config.jobset.x-k8s.io/v1alpha1",
        JOBSETS.format(ns="default"),
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "webhook-probe"},
            "spec": {"replicatedJobs": [{"name": "j", "template": {"spec": {"template": _probe_template()}}}]},
        },
        lambda js: bool((js.get("spec") or {}).get("network")),
    ),
    Controller(
        "lws",
        "config.lws.x-k8s.io/v1alpha1",
        LWS.format(ns="default"),
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "webhook-probe"},
            "spec": {"leaderWorkerTemplate": {"size": 1, "workerTemplate": _probe_template()}},
        },
        lambda lws: bool(((lws.get("spec") or {}).get("networkConfig") or {}).get("subdomainPolicy")),
    ),
)


def _log_tails(logs: list[Path], lines: int = 40) -> str:
    out = []
    for path in logs:
        if path.exists():
            out.append(f"----- {path} -----\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(out)


@pytest.fixture(scope="module")
def running_controllers(kube: Kube) -> Iterator[list[Path]]:
    """JobSet and LeaderWorkerSet controllers running against the suite's cluster, their webhooks registered; their
    logs."""
    if kube.local is None:
        pytest.skip("the workload controllers run only next to the suite's own control plane (not with a kubeconfig)")
    out = _controllers_dir()
    started = time.monotonic()
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(out / "crds"))
    kube.kubectl("wait", "--for=condition=established", "--timeout=60s", "-f", str(out / "crds"))
    tmp = Path(tempfile.mkdtemp(prefix="gpusched-controllers-"))
    procs: list[subprocess.Popen[bytes]] = []
    registered: list[dict[str, Any]] = []
    logs = [tmp / f"{c.name}.log" for c in CONTROLLERS]
    try:
        for c in CONTROLLERS:
            port = free_port()
            cert_dir = tmp / c.name / "certs"
            ca_pem = webhooks.serving_certificate(cert_dir)
            config = tmp / c.name / "config.yaml"
            config.write_text(
                f"apiVersion: {c.config_api}\nkind: Configuration\nleaderElection: {{leaderElect: false}}\n"
                f"internalCertManagement: {{enable: false}}\n"
                f"webhook: {{host: 127.0.0.1, port: {port}, certDir: {cert_dir}}}\n"
                f"metrics: {{bindAddress: '0'}}\nhealth: {{healthProbeBindAddress: '127.0.0.1:{free_port()}'}}\n"
            )
            with open(tmp / f"{c.name}.log", "wb") as log:
                proc = subprocess.Popen(
                    [str(out / f"{c.name}-controller"), f"--kubeconfig={kube.kubeconfig}", f"--config={config}"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            procs.append(proc)
            kube.local.track_process(proc.pid)
            configs = webhooks.configurations(
                kube, out / "webhooks" / c.name, prefix=f"{c.name}-", port=port, ca_pem=ca_pem
            )
            webhooks.wait_serving(
                port,
                ca_pem,
                webhooks.paths(configs),
                timeout=60,
                alive=lambda proc=proc: proc.poll() is None,  # type: ignore[misc]
                what=f"{c.name}-controller",
            )
            webhooks.register(kube, configs)
            registered.extend(configs)
            webhooks.wait_admitted(kube, c.probe_path, c.probe, c.defaulted, timeout=30, what=f"{c.name}-controller")
        print(f"\n[e2e] JobSet and LeaderWorkerSet controllers serving webhooks in {time.monotonic() - started:.1f}s")
        yield logs
        for c, proc in zip(CONTROLLERS, procs, strict=True):
            assert proc.poll() is None, f"{c.name}-controller exited {proc.returncode}:\n{_log_tails(logs)}"
    except BaseException:
        print(f"\n{_log_tails(logs)}", file=sys.stderr)
        raise
    finally:
        webhooks.stop_controllers(kube, procs, registered, tmp=tmp, what="the workload controllers")


@pytest.fixture
def controllers(running_controllers: list[Path], request: pytest.FixtureRequest) -> Iterator[None]:
    """The workload controllers for one scenario: the tail of their logs follows a failure."""
    yield
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(f"\n{_log_tails(running_controllers)}", file=sys.stderr)


def _gangs(s: Scenario, names: list[str], min_member: int, owner_kind: str, timeout: float = 60.0) -> None:
    """Exactly the PodGroups ``names``, each with ``min_member`` and owned (as controller) by an ``owner_kind``."""

    def all_there() -> list[dict[str, Any]] | None:
        groups = kube_mod.podgroups(s)
        return groups if len(groups) >= len(names) else None

    groups = kube_mod.wait_until(
        all_there,
        timeout=timeout,
        what=f"PodGroups {names} for the {owner_kind}",
        describe=lambda: f"PodGroups: {[g['metadata']['name'] for g in kube_mod.podgroups(s)]}; pods: {s.describe()}",
    )
    assert sorted(g["metadata"]["name"] for g in groups) == sorted(names)
    for group in groups:
        assert group["spec"]["minMember"] == min_member, (group["metadata"]["name"], group["spec"])
        owners = [(o["kind"], o.get("controller")) for o in group["metadata"].get("ownerReferences") or []]
        assert owners == [(owner_kind, True)], (group["metadata"]["name"], owners)


def _bound(s: Scenario, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Wait until ``count`` pods of the scenario are bound and Running (or, for a Job's, already Succeeded)."""

    def bound() -> list[dict[str, Any]] | None:
        pods = [p for p in s.pods() if node_of(p) and kube_mod.phase_of(p) in ("Running", "Succeeded")]
        return pods if len(pods) >= count else None

    pods: list[dict[str, Any]] = kube_mod.wait_until(
        bound, timeout=timeout, what=f"{count} pods bound and running", describe=s.describe
    )
    return pods


def _landed_whole(order: kube_mod.BindOrder, gangs: dict[str, list[str]]) -> None:
    """Each gang (name -> its pods' names) had every member created before its first member was bound."""
    piecemeal = {gang: why for gang, members in gangs.items() if (why := order.piecemeal(members))}
    assert not piecemeal, piecemeal


def _condition(obj: dict[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _nodes(s: Scenario, count: int = 2) -> None:
    s.add_nodes([kube_mod.gpu_node(f"{s.name[:40]}-n{i}", rack=f"r{i % 2}") for i in range(count)])


def _timed(label: str, started: float) -> None:
    print(f"\n[e2e] {label}: {time.monotonic() - started:.1f}s")


def test_an_indexed_job_is_one_gang_that_lands_whole_completes_and_takes_its_podgroup_along(sched: Scenario) -> None:
    _nodes(sched)
    sched.start_gpusched()
    order = kube_mod.BindOrder(sched.kube, sched.namespace).start()
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
    started = time.monotonic()
    try:
        sched.kube.request("POST", path, job)
        _gangs(sched, ["job-indexed-job"], 3, "Job")
        pods = _bound(sched, 3)
        index = "batch.kubernetes.io/job-completion-index"
        first = [
            p["metadata"]["name"]
            for p in pods
            if (p["metadata"].get("annotations") or {}).get(index) in {"0", "1", "2"}
        ]
        _landed_whole(order, {"job-indexed-job": first})

        def complete() -> bool:
            status = sched.kube.request("GET", f"{path}/indexed-job").get("status") or {}
            return status.get("succeeded") == 5

        kube_mod.wait_until(complete, timeout=90, what="the Job's 5 completions (kwok completes Job pods)")
        _timed("Job submitted to complete", started)
        gc = kube_mod.delete_workload(sched, f"{path}/indexed-job", timeout=60)
        print(f"[e2e] Job deleted, PodGroup collected: {gc:.1f}s")
    finally:
        order.stop()


def test_a_jobset_is_one_gang_that_lands_whole_completes_and_takes_its_podgroup_along(
    sched: Scenario, controllers: None
) -> None:
    _nodes(sched)
    sched.start_gpusched()
    order = kube_mod.BindOrder(sched.kube, sched.namespace).start()

    # jobset.sigs.k8s.io, Examples > Simple > paralleljobs.yaml (site/static/examples/simple/paralleljobs.yaml in
    # kubernetes-sigs/jobset), with schedulerName added to both pod templates.
    def rjob(name: str, pods: int) -> dict[str, Any]:
        return {
            "name": name,
            "template": {
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
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
        "metadata": {"name": "paralleljobs"},
        "spec": {"replicatedJobs": [rjob("workers", 4), rjob("driver", 1)]},
    }
    path = JOBSETS.format(ns=sched.namespace)
    started = time.monotonic()
    try:
        created = sched.kube.request("POST", path, jobset)
        assert created["spec"].get("network", {}).get("enableDNSHostnames") is True, "JobSet's webhook did not default"
        _gangs(sched, ["jobset-paralleljobs"], 5, "JobSet")
        pods = _bound(sched, 5)
        _landed_whole(order, {"jobset-paralleljobs": [p["metadata"]["name"] for p in pods]})
        assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] for p in pods} == {"workers", "driver"}

        def completed() -> bool:
            return _condition(sched.kube.request("GET", f"{path}/paralleljobs"), "Completed")

        kube_mod.wait_until(
            completed,
            timeout=120,
            what="the JobSet Completed (kwok completes its Jobs' pods)",
            describe=lambda: str(sched.kube.request("GET", f"{path}/paralleljobs").get("status") or {}),
        )
        _timed("JobSet submitted to Completed", started)
        gc = kube_mod.delete_workload(sched, f"{path}/paralleljobs", timeout=60)
        print(f"[e2e] JobSet deleted, PodGroup collected: {gc:.1f}s")
    finally:
        order.stop()


def test_a_leaderworkerset_is_one_gang_per_group_that_lands_whole_runs_and_takes_its_podgroups_along(
    sched: Scenario, controllers: None
) -> None:
    _nodes(sched)
    sched.start_gpusched()
    order = kube_mod.BindOrder(sched.kube, sched.namespace).start()
    # lws.sigs.k8s.io, Examples > Sample (docs/examples/sample/lws.yaml in kubernetes-sigs/lws v0.9.0), with
    # schedulerName added to its one template (the leader's too, as it gives no leaderTemplate).
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "leaderworkerset-sample"},
        "spec": {
            "replicas": 3,
            "leaderWorkerTemplate": {
                "size": 4,
                "workerTemplate": {
                    "spec": {
                        "schedulerName": "gpusched",
                        "containers": [
                            {
                                "name": "nginx",
                                "image": "nginxinc/nginx-unprivileged:1.27",
                                "resources": {"limits": {"cpu": "100m"}, "requests": {"cpu": "50m"}},
                                "ports": [{"containerPort": 8080}],
                            }
                        ],
                    }
                },
            },
        },
    }
    path = LWS.format(ns=sched.namespace)
    started = time.monotonic()
    try:
        created = sched.kube.request("POST", path, lws)
        assert (created["spec"].get("networkConfig") or {}).get("subdomainPolicy"), "LWS's webhook did not default"
        names = [f"leaderworkerset-leaderworkerset-sample-{i}" for i in range(3)]
        _gangs(sched, names, 4, "LeaderWorkerSet")
        pods = _bound(sched, 12, timeout=90)
        by_group: dict[str, list[str]] = {}
        for p in pods:
            group = p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
            by_group.setdefault(f"leaderworkerset-leaderworkerset-sample-{group}", []).append(p["metadata"]["name"])
        assert sorted(by_group) == names and all(len(m) == 4 for m in by_group.values()), by_group
        _landed_whole(order, by_group)

        def available() -> bool:
            return _condition(sched.kube.request("GET", f"{path}/leaderworkerset-sample"), "Available")

        kube_mod.wait_until(
            available,
            timeout=90,
            what="the LeaderWorkerSet Available (all groups ready)",
            describe=lambda: str(sched.kube.request("GET", f"{path}/leaderworkerset-sample").get("status")),
        )
        _timed("LeaderWorkerSet submitted to Available", started)
        gc = kube_mod.delete_workload(sched, f"{path}/leaderworkerset-sample", timeout=60)
        print(f"[e2e] LeaderWorkerSet deleted, 3 PodGroups collected: {gc:.1f}s")
    finally:
        order.stop()


def _gpu_group(name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str]) -> dict[str, Any]:
    """A LeaderWorkerSet of one group of 4 pods x 4 GPUs. ``restartPolicy: None``: the group is not made again
    whole when one of its pods is deleted (the default recreates it)."""
    template = {
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {
                    "name": "worker",
                    "image": "nginxinc/nginx-unprivileged:1.27",
                    "resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "1"}, "requests": {"cpu": "1"}},
                }
            ],
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 4, "restartPolicy": "None", "workerTemplate": template},
        },
    }


def test_an_elastic_leaderworkerset_group_gives_back_its_surplus_to_a_guarantee_and_grows_back(
    sched: Scenario, controllers: None
) -> None:
    """The issue's example through a real controller: on 2 nodes of 8 GPUs, queue qa (guarantee 8) holds a
    LeaderWorkerSet group of 4 pods x 4 GPUs with ``gpusched.io/min-member: 2`` (an elastic gang: min 2, max 4);
    queue qb (guarantee 8) asks 8 GPUs. Exactly the 2 surplus pods (worker indices 3 and 2) are preempted, the core
    pods keep their UIDs, and once qb's pod leaves the group grows back to 4. (A JobSet's or a Job's pods are
    completed at once by kwok, so a group that keeps running is a LeaderWorkerSet's.)"""
    sched.add_nodes([kube_mod.gpu_node(f"{sched.name[:40]}-n{i}") for i in range(2)])
    qa, qb = f"{sched.name}-qa", f"{sched.name}-qb"
    sched.create_queue(kube_mod.queue(qa, guaranteed={"nvidia.com/gpu": "8"}))
    sched.create_queue(kube_mod.queue(qb, guaranteed={"nvidia.com/gpu": "8"}))
    lws = _gpu_group("elastic", labels={kube_mod.LABEL_QUEUE: qa}, annotations={"gpusched.io/min-member": "2"})
    sched.kube.request("POST", LWS.format(ns=sched.namespace), lws)
    names = ["elastic-0", "elastic-0-1", "elastic-0-2", "elastic-0-3"]
    # Every pod exists before gpusched starts, so the gang's core is placed from all of them: its lowest indices.
    kube_mod.wait_until(
        lambda: {p["metadata"]["name"] for p in sched.pods()} >= set(names), timeout=60, what="the group's 4 pods"
    )
    sched.start_gpusched()
    _gangs(sched, ["leaderworkerset-elastic-0"], 2, "LeaderWorkerSet")
    assert kube_mod.podgroups(sched)[0]["spec"]["maxMember"] == 4
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in sched.wait_bound(names, timeout=60)}

    def columns() -> list[str] | None:
        out = sched.kube.kubectl("get", "podgroup", "leaderworkerset-elastic-0", "-n", sched.namespace).stdout
        header, row = out.splitlines()[:2]
        shown = dict(zip(header.split(), row.split(), strict=False))
        if shown.get("RUNNING") != "4":
            return None
        print(f"\n$ kubectl get podgroups\n{out}")
        return [shown.get(k, "") for k in ("RUNNING", "MIN", "MAX")]

    assert kube_mod.wait_until(columns, timeout=30, what="kubectl shows RUNNING 4, MIN 2, MAX 4") == ["4", "2", "4"]

    started = time.monotonic()
    sched.create_pod(kube_mod.pod("big", gpus=8, queue=qb))
    sched.wait_bound(["big"], timeout=90)
    _timed("qb's 8-GPU pod: created to bound, 2 surplus members reclaimed", started)
    for name in ("elastic-0-3", "elastic-0-2"):
        event = sched.wait_event(name, "Preempted")
        assert qb in event["message"], event["message"]
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in sched.pods() if p["metadata"]["name"] in names}
    kept = sorted(n for n in names if now.get(n) == before[n])
    assert kept == ["elastic-0", "elastic-0-1"], f"the core keeps its pods, the surplus is replaced: {now}"
    assert not [n for n in ("elastic-0", "elastic-0-1") if _preempted(sched, n)], "a core pod was preempted"
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())

    started = time.monotonic()
    sched.delete_pod("big")
    grown = sched.wait_bound(names, timeout=90)
    _timed("qb's pod deleted to the group grown back to 4", started)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in grown}
    assert [uids[n] == before[n] for n in names] == [True, True, False, False], uids
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())


def _preempted(s: Scenario, name: str) -> bool:
    return any(e.get("reason") == "Preempted" for e in s.kube.events(s.namespace, name=name))


def test_members_of_a_group_lost_with_their_node_come_back_in_the_same_clique(
    sched: Scenario, controllers: None
) -> None:
    """A LeaderWorkerSet group of 4 x 4 GPUs required in one NVLink clique (clique A: four 8-GPU nodes; clique B:
    one, too small for the group) lands in A. A node holding workers (not the leader) is deleted, and its pods with
    it (as the pod garbage collector deletes the pods of a deleted node); the StatefulSet makes them again, and
    they are bound inside clique A, where the others run, though B has room for them."""
    prefix = sched.name[:40]
    nodes = [kube_mod.gpu_node(f"{prefix}-a{i}", clique="fabric.a") for i in range(4)]
    nodes.append(kube_mod.gpu_node(f"{prefix}-b0", clique="fabric.b"))
    sched.add_nodes(nodes)
    clique_of = {n["metadata"]["name"]: n["metadata"]["labels"][kube_mod.LABEL_CLIQUE] for n in nodes}
    sched.start_gpusched()
    lws = _gpu_group("ring", annotations={"gpusched.io/topology-required": kube_mod.LABEL_CLIQUE})
    sched.kube.request("POST", LWS.format(ns=sched.namespace), lws)
    names = ["ring-0", "ring-0-1", "ring-0-2", "ring-0-3"]
    placed = sched.wait_bound(names, timeout=90)
    assert {clique_of[node_of(p)] for p in placed} == {"fabric.a"}, kube_mod.summary(placed)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in placed}
    leader_node = node_of(next(p for p in placed if p["metadata"]["name"] == "ring-0"))
    failed = next(node_of(p) for p in placed if node_of(p) != leader_node)
    lost = sorted(p["metadata"]["name"] for p in placed if node_of(p) == failed)

    started = time.monotonic()
    sched.kube.request("DELETE", f"/api/v1/nodes/{failed}")
    for name in lost:
        sched.delete_pod(name)

    def replaced() -> list[dict[str, Any]] | None:
        pods = {p["metadata"]["name"]: p for p in sched.pods() if p["metadata"]["name"] in lost}
        fresh = [
            p
            for p in pods.values()
            if p["metadata"]["uid"] != before[p["metadata"]["name"]]
            and node_of(p)
            and kube_mod.phase_of(p) == "Running"
        ]
        return fresh if len(fresh) == len(lost) else None

    fresh = kube_mod.wait_until(replaced, timeout=60, what=f"{lost} made again and bound", describe=sched.describe)
    _timed(f"node {failed} deleted to its {len(lost)} member(s) bound again", started)
    assert {clique_of[node_of(p)] for p in fresh} == {"fabric.a"}, kube_mod.summary(fresh)
    assert all(node_of(p) != failed for p in fresh)
    kept = {p["metadata"]["name"]: p["metadata"]["uid"] for p in sched.pods() if p["metadata"]["name"] not in lost}
    assert all(kept.get(n) == before[n] for n in names if n not in lost), "the other members were touched"
