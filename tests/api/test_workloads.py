"""Which gang a workload's pod joins, on objects shaped as each controller makes them (owner references, labels)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.objects import workloads
from scheduler.api.objects.workloads import group_pod


def ref(api_version: str, kind: str, name: str, uid: str = "") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid or f"uid-{name}", "controller": True}


def obj(
    api_version: str,
    kind: str,
    name: str,
    spec: dict[str, Any] | None = None,
    *,
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ns: str = "team-a",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [owner]
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}


def pod(name: str, owner: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return obj("v1", "Pod", name, {"schedulerName": "gpusched"}, owner=owner, labels=labels)


def indexed_job(name: str = "ddp", parallelism: int = 4, **kw: Any) -> dict[str, Any]:
    spec = {"completionMode": "Indexed", "parallelism": parallelism, "completions": parallelism}
    return obj("batch/v1", "Job", name, spec, **kw)


def test_indexed_job_is_one_gang_of_parallelism_owned_by_the_job() -> None:
    job = indexed_job()
    grouping = group_pod(pod("ddp-0-abc", ref("batch/v1", "Job", "ddp")), [job])
    assert grouping.gang is not None
    assert (grouping.gang.name, grouping.gang.min_member) == ("job-ddp", 4)
    manifest = workloads.podgroup_manifest(grouping.gang)
    assert manifest["metadata"]["namespace"] == "team-a"
    assert manifest["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "ddp", "uid": "uid-ddp", "controller": True}
    ]
    assert manifest["spec"] == {"minMember": 4}


def test_non_indexed_job_needs_one_member_unless_annotated() -> None:
    job = obj("batch/v1", "Job", "work", {"parallelism": 3})
    assert group_pod(pod("w", ref("batch/v1", "Job", "work")), [job]).gang.min_member == 1  # type: ignore[union-attr]
    job["metadata"]["annotations"] = {"gpusched.io/min-member": "3"}
    assert group_pod(pod("w", ref("batch/v1", "Job", "work")), [job]).gang.min_member == 3  # type: ignore[union-attr]


def test_a_job_kueue_admitted_is_one_gang_of_all_its_pods() -> None:
    # A plain Job's workers are interchangeable (one is enough to start), but once Kueue admits the Job it has
    # reserved quota for all four: started piecemeal, the Job would hold that quota with pods that cannot run.
    job = obj(
        "batch/v1", "Job", "train", {"parallelism": 4, "completions": 4}, labels={"kueue.x-k8s.io/queue-name": "q"}
    )
    admitted = pod("train-x", ref("batch/v1", "Job", "train"), labels={"kueue.x-k8s.io/podset": "main"})
    gang = group_pod(admitted, [job]).gang
    assert gang is not None and (gang.name, gang.min_member, gang.max_member) == ("job-train", 4, 4)
    job["metadata"]["annotations"] = {"gpusched.io/job-min-parallelism": "2"}
    gang = group_pod(admitted, [job]).gang
    assert gang is not None and (gang.min_member, gang.max_member) == (2, 4)


def test_indexed_job_with_fewer_completions_than_parallelism() -> None:
    job = obj("batch/v1", "Job", "j", {"completionMode": "Indexed", "parallelism": 8, "completions": 2})
    assert group_pod(pod("p", ref("batch/v1", "Job", "j")), [job]).gang.min_member == 2  # type: ignore[union-attr]


def test_malformed_min_member_is_a_problem_and_the_derived_value_is_used() -> None:
    job = indexed_job(annotations={"gpusched.io/min-member": "many"})
    grouping = group_pod(pod("p", ref("batch/v1", "Job", "ddp")), [job])
    assert grouping.gang is not None and grouping.gang.min_member == 4
    assert len(grouping.problems) == 1
    assert "gpusched.io/min-member" in str(grouping.problems[0]) and "job team-a/ddp" in str(grouping.problems[0])


def test_opt_out_leaves_pods_single_but_keeps_the_queue() -> None:
    job = indexed_job(annotations={"gpusched.io/gang": "false"}, labels={"gpusched.io/queue": "research"})
    grouping = group_pod(pod("p", ref("batch/v1", "Job", "ddp")), [job])
    assert grouping.gang is None and grouping.queue == "research"


def test_cronjob_job_is_its_own_workload() -> None:
    job = indexed_job(owner=ref("batch/v1", "CronJob", "nightly"))
    grouping = group_pod(pod("p", ref("batch/v1", "Job", "ddp")), [job])
    assert grouping.gang is not None and grouping.gang.name == "job-ddp"


def jobset() -> dict[str, Any]:
    def rjob(name: str, replicas: int, parallelism: int) -> dict[str, Any]:
        spec = {"parallelism": parallelism, "completions": parallelism, "template": {"spec": {}}}
        return {"name": name, "replicas": replicas, "template": {"spec": spec}}

    return obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "trainer",
        {"replicatedJobs": [rjob("driver", 1, 1), rjob("workers", 2, 4)]},
    )


def test_jobset_is_one_gang_of_all_replicated_jobs() -> None:
    js = jobset()
    child = obj(
        "batch/v1",
        "Job",
        "trainer-workers-1",
        {"parallelism": 4},
        owner=ref("jobset.x-k8s.io/v1alpha2", "JobSet", "trainer"),
    )
    grouping = group_pod(pod("trainer-workers-1-0", ref("batch/v1", "Job", "trainer-workers-1")), [child, js])
    assert grouping.gang is not None
    assert (grouping.gang.name, grouping.gang.min_member, grouping.gang.owner.kind) == ("jobset-trainer", 9, "JobSet")


def lws(size: int = 4) -> dict[str, Any]:
    return obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "vllm",
        {"replicas": 2, "leaderWorkerTemplate": {"size": size}},
    )


def test_leaderworkerset_is_one_gang_per_group() -> None:
    """Worker pod -> worker StatefulSet -> leader pod -> leader StatefulSet -> LeaderWorkerSet."""
    lw = lws()
    leader_sts = obj(
        "apps/v1", "StatefulSet", "vllm", owner=ref("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm")
    )
    group_label = {"leaderworkerset.sigs.k8s.io/group-index": "1", "leaderworkerset.sigs.k8s.io/name": "vllm"}
    leader = obj("v1", "Pod", "vllm-1", owner=ref("apps/v1", "StatefulSet", "vllm"), labels=group_label)
    worker_sts = obj("apps/v1", "StatefulSet", "vllm-1", owner=ref("v1", "Pod", "vllm-1"))
    worker = pod("vllm-1-2", ref("apps/v1", "StatefulSet", "vllm-1"), labels=group_label)
    from_worker = group_pod(worker, [worker_sts, leader, leader_sts, lw])
    from_leader = group_pod(leader, [leader_sts, lw])
    assert from_worker.gang == from_leader.gang
    assert from_worker.gang is not None
    assert (from_worker.gang.name, from_worker.gang.min_member) == ("leaderworkerset-vllm-1", 4)
    other = group_pod(
        pod("vllm-0", ref("apps/v1", "StatefulSet", "vllm"), labels={"leaderworkerset.sigs.k8s.io/group-index": "0"}),
        [leader_sts, lw],
    )
    assert other.gang is not None and other.gang.name == "leaderworkerset-vllm-0"


def test_trainjob_gangs_its_nodes_and_leaves_initializers_single() -> None:
    tj = obj("trainer.kubeflow.org/v1alpha1", "TrainJob", "llama", {"trainer": {"numNodes": 3}})
    js = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "llama",
        {"replicatedJobs": []},
        owner=ref("trainer.kubeflow.org/v1alpha1", "TrainJob", "llama"),
    )
    node_job = obj("batch/v1", "Job", "llama-node-0", owner=ref("jobset.x-k8s.io/v1alpha2", "JobSet", "llama"))
    node_pod = pod(
        "llama-node-0-0",
        ref("batch/v1", "Job", "llama-node-0"),
        labels={"jobset.sigs.k8s.io/replicatedjob-name": "node"},
    )
    init_pod = pod(
        "llama-init-0-0",
        ref("batch/v1", "Job", "llama-init-0"),
        labels={"jobset.sigs.k8s.io/replicatedjob-name": "dataset-initializer"},
    )
    grouping = group_pod(node_pod, [node_job, js, tj])
    assert grouping.gang is not None and (grouping.gang.name, grouping.gang.min_member) == ("trainjob-llama", 3)
    assert group_pod(init_pod, [node_job, js, tj]).gang is None


def test_pytorchjob_sums_replica_specs() -> None:
    job = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "mnist",
        {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
    )
    labels = {"training.kubeflow.org/job-name": "mnist", "training.kubeflow.org/replica-type": "worker"}
    grouping = group_pod(pod("mnist-worker-0", ref("kubeflow.org/v1", "PyTorchJob", "mnist"), labels), [job])
    assert grouping.gang is not None and (grouping.gang.name, grouping.gang.min_member) == ("pytorchjob-mnist", 4)


def test_kubeflows_own_scheduling_policy_sets_min_member_and_queue() -> None:
    # spec.runPolicy.schedulingPolicy is what the training operator hands Volcano or scheduler-plugins.
    policy = {"minAvailable": 2, "queue": "research"}
    replicas = {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}
    job = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "mnist",
        {"pytorchReplicaSpecs": replicas, "runPolicy": {"schedulingPolicy": policy}},
    )
    labels = {"training.kubeflow.org/job-name": "mnist"}
    grouping = group_pod(pod("mnist-worker-0", ref("kubeflow.org/v1", "PyTorchJob", "mnist"), labels), [job])
    assert grouping.gang is not None and grouping.gang.min_member == 2
    assert grouping.queue == "research"
    mpi = obj(
        "kubeflow.org/v2beta1",
        "MPIJob",
        "pi",
        {"mpiReplicaSpecs": {"Worker": {"replicas": 4}}, "runPolicy": {"schedulingPolicy": {"minAvailable": 3}}},
    )
    worker = pod("pi-worker-0", ref("kubeflow.org/v2beta1", "MPIJob", "pi"), {})
    grouping = group_pod(worker, [mpi])
    assert grouping.gang is not None and grouping.gang.min_member == 3


def test_raycluster_counts_head_and_min_replicas() -> None:
    spec = {
        "headGroupSpec": {"template": {}},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 4, "minReplicas": 2},
            {"groupName": "tpu", "minReplicas": 1, "numOfHosts": 2},
        ],
    }
    cluster = obj("ray.io/v1", "RayCluster", "rc", spec)
    grouping = group_pod(
        pod("rc-head-x", ref("ray.io/v1", "RayCluster", "rc"), {"ray.io/node-type": "head"}), [cluster]
    )
    assert grouping.gang is not None and grouping.gang.min_member == 1 + 2 + 2


def test_mpijob_launcher_and_workers() -> None:
    spec: dict[str, Any] = {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}}
    job = obj("kubeflow.org/v2beta1", "MPIJob", "pi", spec)
    launcher_job = obj("batch/v1", "Job", "pi-launcher", owner=ref("kubeflow.org/v2beta1", "MPIJob", "pi"))
    launcher = pod(
        "pi-launcher-x", ref("batch/v1", "Job", "pi-launcher"), {"training.kubeflow.org/job-role": "launcher"}
    )
    worker = pod(
        "pi-worker-0", ref("kubeflow.org/v2beta1", "MPIJob", "pi"), {"training.kubeflow.org/job-role": "worker"}
    )
    a, b = group_pod(launcher, [launcher_job, job]), group_pod(worker, [job])
    assert a.gang == b.gang and a.gang is not None and a.gang.min_member == 3
    spec["launcherCreationPolicy"] = "WaitForWorkersReady"
    assert group_pod(launcher, [launcher_job, job]).gang is None
    assert group_pod(worker, [job]).gang.min_member == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "chain",
    [
        [],  # a bare pod
        [
            obj("apps/v1", "ReplicaSet", "web-5d8", owner=ref("apps/v1", "Deployment", "web")),
            obj("apps/v1", "Deployment", "web"),
        ],
        [obj("apps/v1", "StatefulSet", "db")],
    ],
    ids=["bare", "deployment", "statefulset"],
)
def test_deployments_statefulsets_and_bare_pods_stay_single(chain: list[dict[str, Any]]) -> None:
    assert group_pod(pod("p"), chain).gang is None


def test_queue_workload_label_then_pod_label_then_namespace() -> None:
    p = pod("p", ref("batch/v1", "Job", "ddp"), labels={"gpusched.io/queue": "from-pod"})
    assert (
        group_pod(p, [indexed_job(labels={"gpusched.io/queue": "from-job"})], namespace_queue="ns").queue == "from-job"
    )
    grouping = group_pod(p, [indexed_job()], namespace_queue="ns")
    assert grouping.queue == "from-pod" and grouping.gang is not None and grouping.gang.queue == "from-pod"
    grouping = group_pod(pod("q", ref("batch/v1", "Job", "ddp")), [indexed_job()], namespace_queue="ns")
    assert grouping.gang is not None and grouping.gang.queue == "ns"
    assert workloads.podgroup_manifest(grouping.gang)["spec"]["queue"] == "ns"
    assert workloads.with_group({}, grouping) == {"gpusched.io/pod-group": "job-ddp", "gpusched.io/queue": "ns"}
    assert workloads.namespace_queue({"metadata": {"labels": {"gpusched.io/queue": "team-a"}}}) == "team-a"


def test_topology_and_priority_come_from_the_workload_or_the_pod() -> None:
    job = indexed_job(annotations={"gpusched.io/topology-required": "rack"})
    p = pod("p", ref("batch/v1", "Job", "ddp"))
    p["spec"]["priorityClassName"] = "high"
    gang = group_pod(p, [job]).gang
    assert gang is not None
    spec = workloads.podgroup_manifest(gang)["spec"]
    assert spec["topology"] == {"required": "rack"} and spec["priorityClassName"] == "high"


def test_long_names_stay_valid_and_stable() -> None:
    name = workloads.gang_name("Job", "x" * 300)
    assert len(name) <= 253 and name == workloads.gang_name("Job", "x" * 300)
    assert name != workloads.gang_name("Job", "x" * 299)


def test_controller_of_takes_the_controlling_reference() -> None:
    body = {"metadata": {"ownerReferences": [{"kind": "Other", "name": "o"}, ref("batch/v1", "Job", "j")]}}
    owner = workloads.controller_of(body)
    assert owner is not None and (owner.group, owner.kind, owner.name) == ("batch", "Job", "j")
    assert workloads.readable(owner) is not None
    assert workloads.controller_of({"metadata": {}}) is None


def _bounds(workload: dict[str, Any], member: dict[str, Any], chain: list[dict[str, Any]]) -> tuple[int, int]:
    gang = group_pod(member, chain).gang
    assert gang is not None
    manifest = workloads.podgroup_manifest(gang)["spec"]
    assert manifest["minMember"] == gang.min_member and manifest.get("maxMember", gang.min_member) == gang.max_member
    return gang.min_member, gang.max_member


def test_elastic_bounds_come_from_each_workload() -> None:
    """minMember below maxMember makes the gang elastic: a Job's min-parallelism annotation under its parallelism,
    a JobSet's or a LeaderWorkerSet group's min-member annotation under its pods, PyTorch's elasticPolicy."""
    job = obj("batch/v1", "Job", "work", {"parallelism": 6}, annotations={"gpusched.io/job-min-parallelism": "2"})
    assert _bounds(job, pod("w", ref("batch/v1", "Job", "work")), [job]) == (2, 6)
    rigid = indexed_job()
    assert _bounds(rigid, pod("p", ref("batch/v1", "Job", "ddp")), [rigid]) == (4, 4)

    js = jobset()
    js["metadata"]["annotations"] = {"gpusched.io/min-member": "3"}
    child = obj("batch/v1", "Job", "trainer-workers-1", owner=ref("jobset.x-k8s.io/v1alpha2", "JobSet", "trainer"))
    member = pod("trainer-workers-1-0", ref("batch/v1", "Job", "trainer-workers-1"))
    assert _bounds(js, member, [child, js]) == (3, 9)

    lw = lws(size=4)
    lw["metadata"]["annotations"] = {"gpusched.io/min-member": "2"}
    sts = obj("apps/v1", "StatefulSet", "vllm", owner=ref("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm"))
    leader = pod(
        "vllm-0", ref("apps/v1", "StatefulSet", "vllm"), labels={"leaderworkerset.sigs.k8s.io/group-index": "0"}
    )
    assert _bounds(lw, leader, [sts, lw]) == (2, 4)

    elastic = {
        "elasticPolicy": {"minReplicas": 2, "maxReplicas": 6},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 4}},
    }
    pt = obj("kubeflow.org/v1", "PyTorchJob", "elastic", elastic)
    assert _bounds(pt, pod("elastic-worker-0", ref("kubeflow.org/v1", "PyTorchJob", "elastic")), [pt]) == (2, 6)
    # A minimum annotated above the workload's size raises the maximum with it.
    job["metadata"]["annotations"] = {"gpusched.io/job-min-parallelism": "8"}
    assert _bounds(job, pod("w", ref("batch/v1", "Job", "work")), [job]) == (8, 8)


def test_a_malformed_min_parallelism_names_its_annotation() -> None:
    job = obj("batch/v1", "Job", "work", {"parallelism": 6}, annotations={"gpusched.io/job-min-parallelism": "x"})
    grouping = group_pod(pod("w", ref("batch/v1", "Job", "work")), [job])
    assert grouping.gang is not None and (grouping.gang.min_member, grouping.gang.max_member) == (1, 6)
    assert "gpusched.io/job-min-parallelism" in str(grouping.problems[0])
