"""Workloads as users submit them: which gang (PodGroup) a pod of a Job, JobSet, LeaderWorkerSet... belongs to.

A pod with ``schedulerName: gpusched`` and no PodGroup label is grouped by its *workload*: the topmost object of
its owner chain (``metadata.ownerReferences`` with ``controller: true``) whose kind is in :data:`WORKLOADS`. A Job
made by a CronJob is its own workload (CronJob is not in the table); a Job made by a JobSet belongs to the JobSet,
and that JobSet to its TrainJob. Kinds outside the table (Deployment, StatefulSet, ReplicaSet) leave a pod single,
and so does a bare pod.

Each workload type is one :class:`WorkloadType` row: the kind, how many members its gang needs (``minMember``) and
which of the workload's pods join which gang (one gang per workload, or one per LeaderWorkerSet group; ``None``
leaves a pod out, e.g. a TrainJob's initializer pods, which run before the training nodes exist). Adding a type is
one row.

Everything here is pure: the owner chain is read by ``scheduler.k8s.feeds.grouper``, which gives :func:`group_pod` the
objects it read. Invariants:

- an explicit PodGroup label on the pod always wins (the pod is not grouped here);
- the opt-out annotation ``gpusched.io/gang: "false"`` on the workload leaves its pods single;
- ``gpusched.io/min-member`` on the workload overrides the derived ``minMember`` (on a Job,
  ``gpusched.io/job-min-parallelism`` says the same, as Kueue's ``kueue.x-k8s.io/job-min-parallelism`` does);
- a workload Kueue admitted (its pods carry ``kueue.x-k8s.io/podset``, ``scheduler.api.objects.admission``) is one
  gang of every pod it runs at once, ``minMember`` = ``maxMember``, unless one of those annotations says otherwise:
  Kueue reserved quota for all of them (with partial admission it lowers the Job's ``parallelism`` first), and a
  workload started piecemeal would hold that quota while waiting for the rest;
- the gang's ``maxMember`` is what the workload runs at once (a Job's parallelism, a JobSet's pods, a
  LeaderWorkerSet group's size, a PyTorchJob's ``elasticPolicy.maxReplicas``...): a ``minMember`` below it makes the
  gang elastic (placed at ``minMember``, grown as room appears, its surplus preempted first);
- the queue: the workload's ``gpusched.io/queue`` label, else the pod's own, else its namespace's default
  (the Namespace's ``gpusched.io/queue`` label, as Kueue's LocalQueue maps a namespace to a ClusterQueue);
- the gang's name is a function of the workload alone (kind, name, group index), so every replica derives the
  same name and creating it twice is harmless.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.objects import admission
from scheduler.api.objects import pod as api_pod

#: On a workload: ``"false"`` leaves its pods single (no PodGroup is made).
ANNOTATION_GANG = "gpusched.io/gang"
#: On a workload: the gang's ``minMember``, instead of the one derived from its spec.
ANNOTATION_MIN_MEMBER = "gpusched.io/min-member"
#: On a Job: the fewest pods it runs with (its ``minMember``); it grows up to ``parallelism`` as room appears.
ANNOTATION_JOB_MIN_PARALLELISM = "gpusched.io/job-min-parallelism"
#: On a PodGroup made here: which workload it was made for.
LABEL_WORKLOAD_KIND = "gpusched.io/workload-kind"
LABEL_WORKLOAD_NAME = "gpusched.io/workload-name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpusched"

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """One ``metadata.ownerReferences`` entry."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


def controller_of(obj: Obj) -> OwnerRef | None:
    """The object's controlling owner (the ownerReference with ``controller: true``), if any."""
    meta = as_map(obj.get("metadata"))
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return OwnerRef(
                api_version=str(ref.get("apiVersion") or ""),
                kind=str(ref.get("kind") or ""),
                name=str(ref.get("name") or ""),
                uid=str(ref.get("uid") or ""),
            )
    return None


@dataclass(frozen=True, slots=True)
class Readable:
    """An owner kind the grouper may read to walk further up: where its objects are served."""

    group: str
    version: str
    plural: str


#: Owner kinds worth reading, by (API group, kind): workloads, and what sits between them and their pods. Any
#: other owner ends the walk (the pod is single unless a workload was found below it).
READABLE: dict[tuple[str, str], Readable] = {
    ("", "Pod"): Readable("", "v1", "pods"),  # a LeaderWorkerSet's leader pod owns its workers' StatefulSet
    ("apps", "StatefulSet"): Readable("apps", "v1", "statefulsets"),
    ("apps", "ReplicaSet"): Readable("apps", "v1", "replicasets"),
    ("apps", "Deployment"): Readable("apps", "v1", "deployments"),
    ("batch", "Job"): Readable("batch", "v1", "jobs"),
    ("jobset.x-k8s.io", "JobSet"): Readable("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): Readable("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    ("trainer.kubeflow.org", "TrainJob"): Readable("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    ("kubeflow.org", "PyTorchJob"): Readable("kubeflow.org", "v1", "pytorchjobs"),
    ("kubeflow.org", "MPIJob"): Readable("kubeflow.org", "v2beta1", "mpijobs"),
    ("ray.io", "RayCluster"): Readable("ray.io", "v1", "rayclusters"),
}


def readable(ref: OwnerRef) -> Readable | None:
    return READABLE.get((ref.group, ref.kind))


# --- the workload table ------------------------------------------------------------------------------------------

#: A pod's gang within its workload: "" for the workload's one gang, a suffix (a group index) for one of several,
#: None to leave the pod single.
GangKey = Callable[[Obj, Obj], str | None]


def _one_gang(_workload: Obj, _pod: Obj) -> str | None:
    return ""


@dataclass(frozen=True, slots=True)
class WorkloadType:
    """One row of :data:`WORKLOADS`: a kind, its gang size and how its pods map to gangs."""

    group: str
    kind: str
    #: ``minMember`` of a gang from the workload object (the annotation override is applied by the caller).
    min_member: Callable[[Obj], int]
    #: Which gang of the workload a pod joins; see :data:`GangKey`.
    gang_key: GangKey = field(default=_one_gang)
    #: ``maxMember``: the members it runs at once (None: ``min_member``'s, a rigid gang unless an annotation
    #: lowers the minimum).
    max_member: Callable[[Obj], int] | None = None


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def as_map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _labels(obj: Obj) -> Mapping[str, Any]:
    return as_map(as_map(obj.get("metadata")).get("labels"))


def _annotations(obj: Obj) -> Mapping[str, Any]:
    return as_map(as_map(obj.get("metadata")).get("annotations"))


def _job_pods(job_spec: Mapping[str, Any]) -> int:
    """Pods a batch/v1 Job runs at once: ``parallelism`` (default 1), at most ``completions`` when set."""
    parallelism = _int(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    if isinstance(completions, int) and not isinstance(completions, bool):
        parallelism = min(parallelism, completions)
    return max(parallelism, 1)


def job_min_member(job: Obj) -> int:
    """An Indexed Job's pods are ranks of one computation: all of them at once. Any other Job's pods are
    interchangeable workers: one is enough to start (the annotation asks for more)."""
    spec = as_map(job.get("spec"))
    if spec.get("completionMode") == "Indexed":
        return _job_pods(spec)
    return 1


def job_max_member(job: Obj) -> int:
    """Every Job runs up to ``parallelism`` pods at once (at most ``completions``)."""
    return _job_pods(as_map(job.get("spec")))


def jobset_min_member(jobset: Obj) -> int:
    """Every replicated job's pods as one gang: the sum of ``replicas`` x its Job's pods."""
    total = 0
    for rjob in _list(as_map(jobset.get("spec")).get("replicatedJobs")):
        job_spec = as_map(as_map(as_map(rjob).get("template")).get("spec"))
        total += _int(as_map(rjob).get("replicas"), 1) * _job_pods(job_spec)
    return max(total, 1)


def lws_min_member(lws: Obj) -> int:
    """One group: the leader and its workers, ``leaderWorkerTemplate.size`` pods in all."""
    return max(_int(as_map(as_map(lws.get("spec")).get("leaderWorkerTemplate")).get("size"), 1), 1)


def lws_gang_key(_lws: Obj, pod: Obj) -> str | None:
    """One gang per group, keyed by the group index the LeaderWorkerSet controller labels every pod with."""
    index = _labels(pod).get("leaderworkerset.sigs.k8s.io/group-index")
    return str(index) if index is not None else None


def trainjob_min_member(trainjob: Obj) -> int:
    """The training nodes: ``spec.trainer.numNodes`` (default 1; the runtime's default is not read here)."""
    return max(_int(as_map(as_map(trainjob.get("spec")).get("trainer")).get("numNodes"), 1), 1)


def trainjob_gang_key(_trainjob: Obj, pod: Obj) -> str | None:
    """Only the training nodes make the gang: the initializers (dataset, model) run to completion before the nodes
    start, so holding them in one gang with the nodes would wait forever."""
    return "" if _labels(pod).get("jobset.sigs.k8s.io/replicatedjob-name") == "node" else None


def _scheduling_policy(job: Obj) -> Mapping[str, Any]:
    """Kubeflow's own gang setting (``spec.runPolicy.schedulingPolicy``: ``minAvailable``, ``queue``), which the
    training operator hands to Volcano or scheduler-plugins; honoured here the same way."""
    return as_map(as_map(as_map(job.get("spec")).get("runPolicy")).get("schedulingPolicy"))


def pytorchjob_min_member(job: Obj) -> int:
    """``runPolicy.schedulingPolicy.minAvailable`` when set, else master and workers: the sum of every replica
    spec's ``replicas``."""
    given = _int(_scheduling_policy(job).get("minAvailable"), 0)
    if given > 0:
        return given
    specs = as_map(as_map(job.get("spec")).get("pytorchReplicaSpecs"))
    return max(sum(_int(as_map(s).get("replicas"), 1) for s in specs.values()), 1)


def _elastic_policy(job: Obj) -> Mapping[str, Any]:
    return as_map(as_map(job.get("spec")).get("elasticPolicy"))


def _pytorch_others(job: Obj) -> int:
    """A PyTorchJob's replicas that are not workers (its Master): elasticPolicy bounds count workers only."""
    specs = as_map(as_map(job.get("spec")).get("pytorchReplicaSpecs"))
    return sum(_int(as_map(s).get("replicas"), 1) for kind, s in specs.items() if str(kind).lower() != "worker")


def pytorchjob_elastic_min(job: Obj) -> int:
    """``schedulingPolicy.minAvailable`` when set, else ``elasticPolicy.minReplicas`` workers (and the master)
    when set, else every replica (:func:`pytorchjob_min_member`)."""
    given = _int(_scheduling_policy(job).get("minAvailable"), 0)
    least = _int(_elastic_policy(job).get("minReplicas"), 0)
    if given <= 0 and least > 0:
        return least + _pytorch_others(job)
    return pytorchjob_min_member(job)


def pytorchjob_max_member(job: Obj) -> int:
    """``elasticPolicy.maxReplicas`` workers (and the master) when set, else every replica."""
    most = _int(_elastic_policy(job).get("maxReplicas"), 0)
    specs = as_map(as_map(job.get("spec")).get("pytorchReplicaSpecs"))
    every = max(sum(_int(as_map(s).get("replicas"), 1) for s in specs.values()), 1)
    return most + _pytorch_others(job) if most > 0 else every


def raycluster_max_member(cluster: Obj) -> int:
    """The head and each worker group's ``maxReplicas`` (x ``numOfHosts``; ``replicas`` when no maximum)."""
    total = 1
    for group in _list(as_map(cluster.get("spec")).get("workerGroupSpecs")):
        g = as_map(group)
        most = _int(g.get("maxReplicas"), _int(g.get("replicas"), _int(g.get("minReplicas"), 0)))
        total += most * max(_int(g.get("numOfHosts"), 1), 1)
    return total


def raycluster_min_member(cluster: Obj) -> int:
    """The head and each worker group's ``minReplicas`` (x ``numOfHosts``): what the cluster needs to start."""
    spec = as_map(cluster.get("spec"))
    total = 1
    for group in _list(spec.get("workerGroupSpecs")):
        g = as_map(group)
        total += _int(g.get("minReplicas"), 0) * max(_int(g.get("numOfHosts"), 1), 1)
    return total


def _mpi_waits_for_workers(job: Obj) -> bool:
    return as_map(job.get("spec")).get("launcherCreationPolicy") == "WaitForWorkersReady"


def mpijob_min_member(job: Obj) -> int:
    """``runPolicy.schedulingPolicy.minAvailable`` when set, else launcher and workers; only the workers when the
    launcher is made after they are ready."""
    given = _int(_scheduling_policy(job).get("minAvailable"), 0)
    if given > 0:
        return given
    specs = as_map(as_map(job.get("spec")).get("mpiReplicaSpecs"))
    workers = _int(as_map(specs.get("Worker")).get("replicas"), 0)
    launcher = 0 if _mpi_waits_for_workers(job) else _int(as_map(specs.get("Launcher")).get("replicas"), 1)
    return max(workers + launcher, 1)


def mpijob_gang_key(job: Obj, pod: Obj) -> str | None:
    if _mpi_waits_for_workers(job) and _labels(pod).get("training.kubeflow.org/job-role") == "launcher":
        return None
    return ""


#: The workload types, by (API group, kind).
WORKLOADS: dict[tuple[str, str], WorkloadType] = {
    (w.group, w.kind): w
    for w in (
        WorkloadType("batch", "Job", job_min_member, max_member=job_max_member),
        WorkloadType("jobset.x-k8s.io", "JobSet", jobset_min_member),
        WorkloadType("leaderworkerset.x-k8s.io", "LeaderWorkerSet", lws_min_member, lws_gang_key),
        WorkloadType("trainer.kubeflow.org", "TrainJob", trainjob_min_member, trainjob_gang_key),
        WorkloadType("kubeflow.org", "PyTorchJob", pytorchjob_elastic_min, max_member=pytorchjob_max_member),
        WorkloadType("kubeflow.org", "MPIJob", mpijob_min_member, mpijob_gang_key),
        WorkloadType("ray.io", "RayCluster", raycluster_min_member, max_member=raycluster_max_member),
    )
}


def workload_type(obj: Obj) -> WorkloadType | None:
    api_version = str(obj.get("apiVersion") or "")
    return WORKLOADS.get((api_version.rpartition("/")[0], str(obj.get("kind") or "")))


# --- grouping a pod ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gang:
    """The PodGroup a workload's pods join: what :func:`podgroup_manifest` writes."""

    namespace: str
    name: str
    min_member: int
    #: ``maxMember`` (0: none); above ``min_member`` the gang is elastic.
    max_member: int = 0
    queue: str = ""
    priority_class_name: str = ""
    topology_required: str = ""
    topology_preferred: str = ""
    #: The workload, the PodGroup's controlling owner (deleted with it by the garbage collector).
    owner: OwnerRef = OwnerRef("", "", "", "")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Grouping:
    """What a pod without a PodGroup label becomes: a member of ``gang``, or (``gang`` None) a single pod; its queue
    either way ("" when nothing names one)."""

    gang: Gang | None
    queue: str = ""
    #: What was wrong with the workload's annotations (the derived values were used instead).
    problems: tuple[InvalidObject, ...] = ()


def gang_name(kind: str, name: str, suffix: str = "") -> str:
    """The PodGroup's name: ``<kind>-<name>[-<suffix>]``, lower case, hashed down to 253 characters when longer."""
    full = f"{kind.lower()}-{name}" + (f"-{suffix}" if suffix else "")
    if len(full) <= 253:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[:242].rstrip('-.')}-{digest}"


def workload_of(chain: Sequence[Obj]) -> Obj | None:
    """The topmost object of ``chain`` (the pod's owners, nearest first) whose kind is in :data:`WORKLOADS`."""
    for obj in reversed(chain):
        if workload_type(obj) is not None:
            return obj
    return None


def group_pod(pod: Obj, chain: Sequence[Obj], *, namespace_queue: str = "") -> Grouping:
    """How ``pod`` (no PodGroup label) is grouped, given its owners (nearest first, as far as they were read) and
    its namespace's default queue. A malformed ``gpusched.io/min-member`` is returned as a problem and the derived
    ``minMember`` is used."""
    pod_labels = _labels(pod)
    workload = workload_of(chain)
    queue = _queue(chain, pod_labels, namespace_queue)
    if workload is None:
        return Grouping(gang=None, queue=queue)
    kind = workload_type(workload)
    assert kind is not None
    annotations = _annotations(workload)
    if str(annotations.get(ANNOTATION_GANG, "")).lower() == "false":
        return Grouping(gang=None, queue=queue)
    suffix = kind.gang_key(workload, pod)
    if suffix is None:
        return Grouping(gang=None, queue=queue)
    meta = as_map(workload.get("metadata"))
    namespace = str(meta.get("namespace") or as_map(pod.get("metadata")).get("namespace") or "default")
    name = str(meta.get("name") or "")
    min_member = kind.min_member(workload)
    max_member = max((kind.max_member or kind.min_member)(workload), min_member)
    problems: tuple[InvalidObject, ...] = ()
    key = ANNOTATION_MIN_MEMBER
    if kind.kind == "Job" and annotations.get(ANNOTATION_JOB_MIN_PARALLELISM) is not None:
        key = ANNOTATION_JOB_MIN_PARALLELISM
    raw = annotations.get(key)
    if raw is None and admission.kueue_admitted(pod_labels):
        min_member = max_member
    if raw is not None:
        override = int(str(raw)) if str(raw).strip().isdigit() else 0
        if override >= 1:
            min_member = override
            max_member = max(max_member, min_member)
        else:
            problems = (
                InvalidObject(
                    f"{raw!r} is not an integer >= 1; minMember {min_member} is used",
                    obj=f"{kind.kind.lower()} {namespace}/{name}",
                    field=f"metadata.annotations[{key}]",
                ),
            )
    pod_annotations = _annotations(pod)
    pod_spec = as_map(pod.get("spec"))
    return Grouping(
        gang=Gang(
            namespace=namespace,
            name=gang_name(kind.kind, name, suffix),
            min_member=min_member,
            max_member=max_member,
            queue=queue,
            priority_class_name=str(pod_spec.get("priorityClassName") or ""),
            topology_required=_first(annotations, pod_annotations, key=api_pod.ANNOTATION_TOPOLOGY_REQUIRED),
            topology_preferred=_first(annotations, pod_annotations, key=api_pod.ANNOTATION_TOPOLOGY_PREFERRED),
            owner=OwnerRef(
                api_version=str(workload.get("apiVersion") or ""),
                kind=kind.kind,
                name=name,
                uid=str(meta.get("uid") or ""),
            ),
        ),
        queue=queue,
        problems=problems,
    )


def _queue(chain: Sequence[Obj], pod_labels: Mapping[str, Any], namespace_queue: str) -> str:
    """The workload's label (the topmost owner naming one) or its Kubeflow ``schedulingPolicy.queue``, else the
    pod's own label, else the namespace's default."""
    for obj in reversed(chain):
        value = _labels(obj).get(api_pod.LABEL_QUEUE) or _scheduling_policy(obj).get("queue")
        if value:
            return str(value)
    return str(pod_labels.get(api_pod.LABEL_QUEUE) or namespace_queue or "")


def _first(*maps: Mapping[str, Any], key: str) -> str:
    for m in maps:
        if m.get(key):
            return str(m[key])
    return ""


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def namespace_queue(namespace: Obj) -> str:
    """A Namespace's default queue: its ``gpusched.io/queue`` label ("" without one)."""
    return str(_labels(namespace).get(api_pod.LABEL_QUEUE) or "")


def podgroup_manifest(gang: Gang) -> dict[str, Any]:
    """The PodGroup object for ``gang``, owned by its workload (so the garbage collector deletes it with it)."""
    spec: dict[str, Any] = {"minMember": gang.min_member}
    if gang.max_member > gang.min_member:
        spec["maxMember"] = gang.max_member
    if gang.queue:
        spec["queue"] = gang.queue
    if gang.priority_class_name:
        spec["priorityClassName"] = gang.priority_class_name
    topology = {k: v for k, v in (("required", gang.topology_required), ("preferred", gang.topology_preferred)) if v}
    if topology:
        spec["topology"] = topology
    return {
        "apiVersion": f"{api_podgroup.GROUP}/{api_podgroup.VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": gang.name,
            "namespace": gang.namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_WORKLOAD_KIND: gang.owner.kind,
                LABEL_WORKLOAD_NAME: gang.owner.name[:63].rstrip("-_."),
            },
            "ownerReferences": [
                {
                    "apiVersion": gang.owner.api_version,
                    "kind": gang.owner.kind,
                    "name": gang.owner.name,
                    "uid": gang.owner.uid,
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def with_group(labels: Mapping[str, str], grouping: Grouping) -> dict[str, str]:
    """A pod's labels as the core should see them: its gang (in memory only) and its queue when it names none."""
    out = dict(labels)
    if grouping.gang is not None:
        out[api_pod.LABEL_POD_GROUP] = grouping.gang.name
    if grouping.queue and not out.get(api_pod.LABEL_QUEUE):
        out[api_pod.LABEL_QUEUE] = grouping.queue
    return out
