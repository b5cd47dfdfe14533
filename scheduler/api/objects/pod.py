"""A pod as the scheduler sees it: what it requests, where it may go, and where it is.

:func:`parse_pod` turns a raw Kubernetes pod dict into a :class:`PodRequest`. The effective request is
computed as kube-scheduler does: the larger of the sum of the app containers (plus restartable init
containers, i.e. sidecars) and the largest init container (plus the sidecars started before it), plus the
pod overhead. Whole GPUs come from ``nvidia.com/gpu`` in requests or limits; a shared GPU from the
``gpusched.io/gpu-milli`` annotation.

A pending pod of ours that asks for something gpusched does not honour (see :func:`unsupported` and docs/pods.md)
is refused with :class:`Unsupported`, a kind of :class:`InvalidObject` naming the field: the operator reports it
as it reports any pod it cannot read (an Event and ``PodScheduled=False``), and the pod waits, never placed as if
it had not asked. Bound pods and other schedulers' pods are read whatever they ask: they hold their node's room.

A pod's declared run time is read by :mod:`scheduler.api.objects.run_time` (docs/pods.md).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.basics import fields, quantity, resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import NO_GPU, GpuRequest, ResourceList
from scheduler.api.crds import topology as api_topology
from scheduler.api.crds.topology import NO_CONSTRAINT, TopologyConstraint
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import extended_resources as api_extended
from scheduler.api.devices import hami as api_hami
from scheduler.api.devices import numa as api_numa
from scheduler.api.objects import affinity as api_affinity
from scheduler.api.objects import host_ports, selectors
from scheduler.api.objects import run_time as api_run_time
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.run_time import RunTime

SCHEDULER_NAME = "gpusched"
ANNOTATION_GPU_MILLI = "gpusched.io/gpu-milli"
ANNOTATION_GPU_MEMORY = "gpusched.io/gpu-memory"
ANNOTATION_GPU_MODEL = "gpusched.io/gpu-model"
ANNOTATION_GPU_IDS = "gpusched.io/gpu-ids"
#: A plain pod's own topology constraint: a level of the Topology (its name or node label), as in a PodGroup's
#: ``spec.topology``.
ANNOTATION_TOPOLOGY_REQUIRED = "gpusched.io/topology-required"
ANNOTATION_TOPOLOGY_PREFERRED = "gpusched.io/topology-preferred"
#: ``never``: consolidation never moves the pod (``allow``, the default: it may, within the Queue's rules).
ANNOTATION_CONSOLIDATION = "gpusched.io/consolidation"
CONSOLIDATION_VALUES = ("allow", "never")
LABEL_POD_GROUP = "gpusched.io/pod-group"
LABEL_POD_GROUP_COMPAT = "scheduling.x-k8s.io/pod-group"
LABEL_QUEUE = "gpusched.io/queue"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"


class Unsupported(InvalidObject):
    """A pod asks for something gpusched does not honour yet: it is not scheduled rather than misplaced."""


@dataclass(frozen=True, slots=True)
class PodRequest:
    """The scheduling-relevant view of one pod."""

    namespace: str
    name: str
    uid: str = ""
    #: Effective requests in scheduler units, ``pods`` included (1); GPUs are in ``gpu``.
    resources: ResourceList = field(default_factory=dict)
    gpu: GpuRequest = NO_GPU
    priority: int = 0
    scheduler_name: str = SCHEDULER_NAME
    node_name: str = ""
    phase: str = "Pending"
    #: ``status.reason``: why its node failed it (``TopologyAffinityError``, ``OutOfcpu``...), "" otherwise.
    status_reason: str = ""
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[selectors.NodeSelectorTerm, ...] = ()
    tolerations: tuple[selectors.Toleration, ...] = ()
    #: GPU indices on ``node_name`` recorded by the ``gpusched.io/gpu-ids`` annotation, if any.
    gpu_ids: tuple[int, ...] = ()
    #: ``nvidia.com/gpu`` of each of ``spec.containers`` (empty: none asks), to deal the chosen GPUs out to them as
    #: HAMi's device plugin wants them (``scheduler.api.devices.hami``).
    gpu_per_container: tuple[int, ...] = ()
    #: The pod's own topology constraint, from the ``gpusched.io/topology-*`` annotations.
    topology: TopologyConstraint = NO_CONSTRAINT
    #: Host ports its containers and sidecars bind on the node (``scheduler.api.objects.host_ports``).
    host_ports: tuple[host_ports.HostPort, ...] = ()
    #: Inter-pod affinity and anti-affinity (``scheduler.api.objects.affinity``).
    pod_affinity: api_affinity.PodAffinity = api_affinity.NO_AFFINITY
    #: topologySpreadConstraints (``scheduler.api.objects.affinity.SpreadConstraint``).
    spread: tuple[api_affinity.SpreadConstraint, ...] = ()
    #: Preferred node affinity: (weight, term) pairs, scored by the ``node_rules`` plugin.
    node_preferences: tuple[tuple[int, selectors.NodeSelectorTerm], ...] = ()
    #: The claims its ``persistentVolumeClaim`` and ``ephemeral`` volumes use (``scheduler.api.objects.volumes``).
    volumes: tuple[api_volumes.PodClaim, ...] = ()
    #: Its ``spec.resourceClaims`` (Dynamic Resource Allocation, ``scheduler.api.devices.dra``). The whole GPUs those
    # claims
    #: ask for are in ``gpu`` once the operator has read the claims (``scheduler.k8s.ports.device_claims``); a bound
    #: pod's, from the ``gpusched.io/gpu-ids`` annotation gpusched wrote.
    resource_claims: tuple[api_dra.PodClaim, ...] = ()
    #: The extended resources (``nvidia.com/gpu`` among them) each container asks for: where a DeviceClass maps one
    #: to DRA and the node has none from a device plugin, the scheduler makes a claim for them
    #: (``scheduler.api.devices.extended_resources``).
    extended_asks: tuple[api_extended.ContainerAsk, ...] = ()
    #: The uid of the pod's controller (ReplicaSet, StatefulSet, Job...), for the cluster-default spreading.
    owner: str = ""
    #: The kind of that controller (``ReplicaSet``, ``Job``...): consolidation moves only pods a controller
    #: recreates, and tells training (a ``Job``'s pods) from the rest.
    owner_kind: str = ""
    #: The name of that controller (a Reservation's owner reference names it, ``scheduler.api.crds.reservation``).
    owner_name: str = ""
    #: The label pairs of the Services that select the pod (their selectors merged), for the cluster-default
    #: spreading: set by the operator, which watches Services (kube-scheduler's default selector reads them too).
    service_labels: tuple[tuple[str, str], ...] = ()
    #: ``spec.preemptionPolicy``: ``Never`` keeps the pod from preempting others (it waits for room instead).
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    #: What the node's Topology Manager aligns of it (each container's requests, Guaranteed or not), and the NUMA
    #: policy it asks for (``scheduler.api.devices.numa``).
    numa: api_numa.PodAsk = api_numa.NO_ASK
    created: float = 0.0
    #: Its declared run time (:class:`RunTime`), None when it declares none.
    run_time: RunTime | None = None
    #: When it started on its node (``status.startTime``, Unix seconds); 0 when not started, or not known.
    started: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pod_group(self) -> str:
        return self.labels.get(LABEL_POD_GROUP) or self.labels.get(LABEL_POD_GROUP_COMPAT) or ""

    @property
    def queue(self) -> str:
        return self.labels.get(LABEL_QUEUE, "")

    @property
    def terminal(self) -> bool:
        """A pod that no longer holds resources."""
        return self.phase in ("Succeeded", "Failed")


def expected_end(pod: PodRequest, *, started: float | None = None) -> float | None:
    """When ``pod`` is expected to end: its start plus its declared run time; None without a run time or a start.

    The start is the pod's own (``status.startTime``) when the API server showed it, else ``started`` (when the
    scheduler saw it placed: ``scheduler.core.jobs.Job.started``, in the same clock)."""
    start = pod.started or started
    if pod.run_time is None or not start:
        return None
    return start + pod.run_time.seconds


#: A pod spec's init containers or containers, each with its requests (``resources.read_containers``).
Containers = tuple[resources.ContainerRequests, ...]


def effective_requests(
    spec: Mapping[str, object], *, obj: str, read: tuple[Containers, Containers] | None = None
) -> ResourceList:
    """The pod's effective requests, as kube-scheduler computes them (without the implicit ``pods``); ``read``: the
    spec's containers as :func:`scheduler.api.basics.resources.read_containers` read them, when already read."""
    init_containers, containers = read if read is not None else resources.read_containers(spec, obj=obj)
    total: ResourceList = {}
    for c in containers:
        resources.add(total, c.requests)
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for c in init_containers:
        if c.container.get("restartPolicy") == "Always":
            resources.add(sidecars, c.requests)
            resources.maximum(init_peak, sidecars)
        else:
            running = dict(sidecars)
            resources.add(running, c.requests)
            resources.maximum(init_peak, running)
    resources.add(total, sidecars)
    resources.maximum(total, init_peak)
    overhead = resources.parse_resource_list(spec.get("overhead"), obj=obj, field="spec.overhead")
    resources.add(total, overhead)
    return {name: amount for name, amount in total.items() if amount}


def _gpu_request(
    requested: ResourceList, annotations: Mapping[str, str], *, obj: str, share: api_hami.Share | None = None
) -> GpuRequest:
    whole = requested.pop(resources.GPU, 0)
    for name in api_hami.RESOURCES:
        requested.pop(name, None)
    models: tuple[str, ...] = ()
    raw_model = annotations.get(ANNOTATION_GPU_MODEL, "")
    if raw_model:
        models = tuple(m.strip() for m in raw_model.split("|"))
        if not all(models):
            raise InvalidObject(
                f"{raw_model!r} is not a list of models like 'A100|H100'",
                obj=obj,
                field=f"metadata.annotations[{ANNOTATION_GPU_MODEL}]",
            )
    raw_milli = annotations.get(ANNOTATION_GPU_MILLI)
    if raw_milli is None:
        if ANNOTATION_GPU_MEMORY in annotations:
            raise InvalidObject(
                f"{ANNOTATION_GPU_MEMORY} needs {ANNOTATION_GPU_MILLI}",
                obj=obj,
                field=f"metadata.annotations[{ANNOTATION_GPU_MEMORY}]",
            )
        hami_shared = api_hami.shared_gpu(share, whole=whole, milli=None) if share else None
        if hami_shared is not None:
            return GpuRequest(count=1, milli=hami_shared[0], memory=hami_shared[1], models=models)
        if whole == 0:
            return resources.NO_GPU if not models else GpuRequest(models=models)
        return GpuRequest(count=whole, milli=resources.MILLI_PER_GPU, models=models)
    field_milli = f"metadata.annotations[{ANNOTATION_GPU_MILLI}]"
    try:
        milli = int(raw_milli)
    except ValueError:
        raise InvalidObject(f"{raw_milli!r} is not an integer 1..999", obj=obj, field=field_milli) from None
    if not 1 <= milli <= 999:
        raise InvalidObject(
            f"{milli} is outside 1..999 (use nvidia.com/gpu for whole GPUs)", obj=obj, field=field_milli
        )
    if whole > 1:
        # One GPU asked through the device plugin (nvidia.com/gpu: 1) is the shared one: HAMi's needs it.
        raise InvalidObject(
            f"a shared GPU ({ANNOTATION_GPU_MILLI}) is one GPU: ask for {resources.GPU} 1 with it, or none",
            obj=obj,
            field=field_milli,
        )
    memory = 0
    raw_memory = annotations.get(ANNOTATION_GPU_MEMORY)
    if share is not None and (share.cores or (share.memory_mib and raw_memory is not None)):
        raise InvalidObject(
            f"set either {ANNOTATION_GPU_MILLI} and {ANNOTATION_GPU_MEMORY}, or {api_hami.RESOURCE_CORES} and "
            f"{api_hami.RESOURCE_MEMORY}",
            obj=obj,
            field=field_milli,
        )
    hami_shared = api_hami.shared_gpu(share, whole=1, milli=milli) if share else None
    if hami_shared is not None:
        memory = hami_shared[1]
    if raw_memory is not None:
        memory = quantity.to_units(
            quantity.parse_quantity(raw_memory, obj=obj, field=f"metadata.annotations[{ANNOTATION_GPU_MEMORY}]")
        )
    return GpuRequest(count=1, milli=milli, memory=memory, models=models)


def read_gpu_ids(annotations: Mapping[str, str], *, obj: str) -> tuple[int, ...]:
    raw = annotations.get(ANNOTATION_GPU_IDS, "").strip()
    if not raw:
        return ()
    try:
        ids = tuple(int(part) for part in raw.split(","))
    except ValueError:
        raise InvalidObject(
            f"{raw!r} is not a comma-separated list of GPU indices",
            obj=obj,
            field=f"metadata.annotations[{ANNOTATION_GPU_IDS}]",
        ) from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise InvalidObject(
            f"{raw!r} has negative or repeated GPU indices",
            obj=obj,
            field=f"metadata.annotations[{ANNOTATION_GPU_IDS}]",
        )
    return ids


def str_map(raw: object, *, obj: str, field: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidObject("expected a map of strings", obj=obj, field=field)
    return {str(k): str(v) for k, v in raw.items()}


#: In-tree volume sources that tie a pod to a node or a zone (kube-scheduler's VolumeZone, VolumeRestrictions and
#: NodeVolumeLimits read them), which gpusched does not model: claims (``persistentVolumeClaim``, ``ephemeral``)
#: are honoured by the ``volumes`` plugin; these are refused.
_NODE_BOUND_VOLUMES = (
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "azureDisk",
    "cinder",
    "rbd",
    "iscsi",
)


def _namespace_selector_with_labels(affinity: object) -> str | None:
    """The first pod affinity term whose namespaceSelector has labels: namespaces' labels are not watched."""
    if not isinstance(affinity, Mapping):
        return None
    for name in ("podAffinity", "podAntiAffinity"):
        part = affinity.get(name)
        if not isinstance(part, Mapping):
            continue
        for kind in (
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        ):
            terms = part.get(kind)
            for i, term in enumerate(terms if isinstance(terms, list) else ()):
                if not isinstance(term, Mapping):
                    continue
                inner = term.get("podAffinityTerm", term) if kind.startswith("preferred") else term
                selector = inner.get("namespaceSelector") if isinstance(inner, Mapping) else None
                if isinstance(selector, Mapping) and (selector.get("matchLabels") or selector.get("matchExpressions")):
                    where = "podAffinityTerm.namespaceSelector" if kind.startswith("preferred") else "namespaceSelector"
                    return f"spec.affinity.{name}.{kind}[{i}].{where}"
    return None


def unsupported(spec: Mapping[str, object]) -> list[tuple[str, str]]:
    """What in a pod spec gpusched does not honour yet, as (field, what) pairs; empty when it honours it all.

    Each of these changes where kube-scheduler may put the pod (or whether it may be scheduled at all), so a
    pod asking for one must not be placed as if it had not.
    """
    found: list[tuple[str, str]] = []
    namespace_selector = _namespace_selector_with_labels(spec.get("affinity"))
    if namespace_selector is not None:
        found.append((namespace_selector, "pod affinity terms selecting namespaces by label (namespaceSelector)"))
    volumes = spec.get("volumes")
    for i, volume in enumerate(volumes if isinstance(volumes, list) else ()):
        kind = next((k for k in _NODE_BOUND_VOLUMES if k in volume), None) if isinstance(volume, Mapping) else None
        if kind is not None:
            found.append((f"spec.volumes[{i}].{kind}", f"{kind} volumes"))
            break
    return found


_PREFERRED = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
_REQUIRED_TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"


def _node_preferences(spec: Mapping[str, object], *, obj: str) -> tuple[tuple[int, selectors.NodeSelectorTerm], ...]:
    """Preferred node affinity as (weight, term): each term read as a required one would be."""
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    raw = (
        node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidObject("expected a list of weighted terms", obj=obj, field=_PREFERRED)
    parsed = []
    for i, item in enumerate(raw):
        where = f"{_PREFERRED}[{i}]"
        weight = item.get("weight") if isinstance(item, Mapping) else None
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise InvalidObject(f"{weight!r} is not a weight 1..100", obj=obj, field=f"{where}.weight")
        assert isinstance(item, Mapping)
        one = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [item.get("preference")]}
            }
        }
        try:
            (term,) = selectors.parse_node_affinity({"affinity": one}, obj=obj)
        except InvalidObject as exc:
            raise InvalidObject(
                exc.reason, obj=obj, field=exc.field.replace(_REQUIRED_TERMS, f"{where}.preference")
            ) from None
        parsed.append((weight, term))
    return tuple(parsed)


def parse_pod(raw: Mapping[str, object], *, scheduler_name: str = SCHEDULER_NAME) -> PodRequest:
    """Parse a Kubernetes pod (a dict as the API server returns it).

    Raises :class:`InvalidObject` naming the pod and the field for anything the scheduler cannot accept, and
    :class:`Unsupported` for a pending pod of ours (``spec.schedulerName`` is ``scheduler_name``, the name
    ``gpusched run --scheduler-name`` serves) asking for what gpusched does not honour (:func:`unsupported`).
    """
    meta, spec, status, namespace, name, obj = fields.object_parts(raw, word="pod", kind="pod", namespaced=True)
    labels = str_map(meta.get("labels"), obj=obj, field="metadata.labels")
    annotations = str_map(meta.get("annotations"), obj=obj, field="metadata.annotations")
    read = resources.read_containers(spec, obj=obj)
    requested = effective_requests(spec, obj=obj, read=read)
    asks = (
        api_extended.parse_container_asks(spec, obj=obj, read=read)
        if any(api_extended.is_extended(r) for r in requested)
        else ()
    )
    # HAMi's per-device resources show in the effective request when any container asks for one (sums and maxima
    # keep every name): most pods ask for none, and skip reading every container again.
    share = api_hami.share_of(spec, obj=obj) if any(r in requested for r in api_hami.RESOURCES) else None
    gpu = _gpu_request(requested, annotations, obj=obj, share=share)
    run_time, time_problems = (
        api_run_time.read(spec, labels, annotations, obj=obj)
        if api_run_time.declares(spec, labels, annotations)
        else (None, ())
    )
    if (spec.get("schedulerName") or "default-scheduler") == scheduler_name and not spec.get("nodeName"):
        if time_problems:
            raise time_problems[0]
        milli = gpu.milli if ANNOTATION_GPU_MILLI in annotations else None
        refused = unsupported(spec) + api_hami.unsupported(share, whole=gpu.count, milli=milli)
        moves = annotations.get(ANNOTATION_CONSOLIDATION, "allow")
        if moves not in CONSOLIDATION_VALUES:
            # Only a pod not yet placed is refused: a bound pod must stay counted on its node, and reads as never.
            raise InvalidObject(
                f"{moves!r} is not one of {', '.join(CONSOLIDATION_VALUES)}",
                obj=obj,
                field=f"metadata.annotations[{ANNOTATION_CONSOLIDATION}]",
            )
        if refused:
            field_name = refused[0][0]
            what = "; ".join(w for _, w in refused)
            raise Unsupported(
                f"gpusched does not support {what} yet; schedule this pod with another scheduler or remove "
                "the field (docs/pods.md)",
                obj=obj,
                field=field_name,
            )
    requested[resources.PODS] = 1
    resource_claims = api_dra.parse_pod_claims(spec, status, obj=obj)
    gpu_ids = read_gpu_ids(annotations, obj=obj)
    if resource_claims and gpu.count and not spec.get("nodeName") and not gpu_ids:
        raise InvalidObject(
            "a pod gets its GPUs either from a device plugin (nvidia.com/gpu, gpusched.io/gpu-milli) or from "
            "ResourceClaims, not both (docs/devices.md)",
            obj=obj,
            field="spec.resourceClaims",
        )
    if (resource_claims or asks) and gpu_ids and not gpu.count:
        # The GPUs gpusched allocated through the pod's claims (its own, or the one made for its extended
        # resources; whole devices): counted as the device plugin's.
        gpu = GpuRequest(count=len(gpu_ids), milli=resources.MILLI_PER_GPU)
    init_containers, containers = read
    if init_containers:  # sidecars run beside the app containers: aligned as they are
        sidecars = tuple(c for c in init_containers if c.container.get("restartPolicy") == "Always")
        containers = (*containers, *sidecars)
        init_containers = tuple(c for c in init_containers if c not in sidecars)
    numa_ask = api_numa.pod_ask(
        containers,
        init_containers,
        qos_class=str(status.get("qosClass") or ""),
        annotations=annotations,
        overhead=bool(spec.get("overhead")),
        obj=obj,
    )
    priority = spec.get("priority") or 0
    if not isinstance(priority, int):
        raise InvalidObject(f"{priority!r} is not an integer", obj=obj, field="spec.priority")
    preemption_policy = spec.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
    if preemption_policy not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        raise InvalidObject(
            f"{preemption_policy!r} is not PreemptLowerPriority or Never", obj=obj, field="spec.preemptionPolicy"
        )
    # The texts that thousands of pods repeat (their namespace, scheduler, node, phase) are interned: a listing's
    # decoder makes a new string for each pod's, which its record would keep (docs/performance.md, start-up).
    return PodRequest(
        namespace=sys.intern(namespace),
        name=name,
        uid=str(meta.get("uid") or ""),
        resources=requested,
        gpu=gpu,
        gpu_per_container=api_hami.gpus_per_container(spec, obj=obj) if gpu.count else (),
        priority=priority,
        scheduler_name=sys.intern(str(spec.get("schedulerName") or "default-scheduler")),
        node_name=sys.intern(str(spec.get("nodeName") or "")),
        phase=sys.intern(str(status.get("phase") or "Pending")),
        status_reason=str(status.get("reason") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        labels=labels,
        annotations=annotations,
        node_selector=str_map(spec.get("nodeSelector"), obj=obj, field="spec.nodeSelector"),
        affinity=selectors.parse_node_affinity(spec, obj=obj),
        tolerations=selectors.parse_tolerations(spec.get("tolerations"), obj=obj),
        gpu_ids=gpu_ids,
        host_ports=host_ports.parse_host_ports(spec, obj=obj),
        pod_affinity=api_affinity.parse_pod_affinity(spec, namespace=namespace, labels=labels, obj=obj),
        node_preferences=_node_preferences(spec, obj=obj),
        spread=api_affinity.parse_spread(spec.get("topologySpreadConstraints"), labels=labels, obj=obj),
        volumes=api_volumes.parse_pod_claims(spec, pod_name=name, obj=obj),
        resource_claims=resource_claims,
        extended_asks=asks,
        owner=api_affinity.controller_of(meta),
        owner_kind=api_affinity.controller_kind_of(meta),
        owner_name=api_affinity.controller_name_of(meta),
        preemption_policy=sys.intern(str(preemption_policy)),
        numa=numa_ask,
        run_time=run_time,
        started=fields.unix_time(status.get("startTime")),
        topology=api_topology.parse_constraint(
            annotations.get(ANNOTATION_TOPOLOGY_REQUIRED),
            annotations.get(ANNOTATION_TOPOLOGY_PREFERRED),
            obj=obj,
            required_field=f"metadata.annotations[{ANNOTATION_TOPOLOGY_REQUIRED}]",
            preferred_field=f"metadata.annotations[{ANNOTATION_TOPOLOGY_PREFERRED}]",
        ),
    )


#: The annotations a bound pod is read without: a malformed one must not make the pod vanish from its node.
_SCHEDULING_ANNOTATIONS = (
    ANNOTATION_GPU_MODEL,
    ANNOTATION_GPU_MILLI,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_GPU_IDS,
    ANNOTATION_TOPOLOGY_REQUIRED,
    ANNOTATION_TOPOLOGY_PREFERRED,
    api_numa.KOORDINATOR_POD_SPEC,
)


def parse_bound_pod(raw: Mapping[str, object]) -> tuple[PodRequest, tuple[InvalidObject, ...]]:
    """Parse a pod that is on a node (``spec.nodeName`` set), whatever its ``gpusched.io/`` annotations say now.

    A bound pod holds its node's capacity until it ends: dropping it because an annotation was edited into
    something malformed after the binding would hand its GPUs out again. Each malformed scheduling annotation is
    left out and returned as a problem; a shared GPU whose share can no longer be read counts as the whole GPU
    (the safe side: never over-commit). A run time that cannot be read is left out and returned as a problem too.
    Raises :class:`InvalidObject` only for what the API server itself validates (containers' resources, names), as
    :func:`parse_pod` does.
    """
    try:
        pod = parse_pod(raw)
    except InvalidObject as first:
        problem = first
    else:
        return pod, run_time_problems(raw, pod)
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        raise problem
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping) or not any(name in annotations for name in _SCHEDULING_ANNOTATIONS):
        raise problem
    kept = dict(annotations)
    problems: list[InvalidObject] = []
    shared = ANNOTATION_GPU_MILLI in kept
    for name in _SCHEDULING_ANNOTATIONS:
        if name not in kept:
            continue
        trial = {key: value for key, value in kept.items() if key not in _SCHEDULING_ANNOTATIONS or key == name}
        if name == ANNOTATION_GPU_MEMORY and ANNOTATION_GPU_MILLI in kept:
            trial[ANNOTATION_GPU_MILLI] = kept[ANNOTATION_GPU_MILLI]
        try:
            parse_pod({**raw, "metadata": {**meta, "annotations": trial}})
        except InvalidObject as exc:
            problems.append(exc)
            del kept[name]
            if name in (ANNOTATION_GPU_MILLI, ANNOTATION_GPU_MEMORY):
                kept.pop(ANNOTATION_GPU_MILLI, None)
                kept.pop(ANNOTATION_GPU_MEMORY, None)
    if not problems:
        raise problem
    pod = parse_pod({**raw, "metadata": {**meta, "annotations": kept}})
    problems.extend(run_time_problems(raw, pod))
    if shared and ANNOTATION_GPU_MILLI not in kept and pod.gpu.count == 0:
        pod = dataclasses.replace(pod, gpu=GpuRequest(count=1, milli=resources.MILLI_PER_GPU, models=pod.gpu.models))
    return pod, tuple(problems)


def run_time_problems(raw: Mapping[str, object], pod: PodRequest) -> tuple[InvalidObject, ...]:
    """What of a bound pod's declared run time cannot be read (left out of ``pod.run_time``)."""
    spec = raw.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    if not api_run_time.declares(spec, pod.labels, pod.annotations):
        return ()
    return api_run_time.read(spec, pod.labels, pod.annotations, obj=f"pod {pod.key}")[1]
