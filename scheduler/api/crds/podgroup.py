"""PodGroup: a gang of pods placed all or nothing (``scheduling.gpusched.io/v1alpha1``, namespaced).

A pod joins a group with the label ``gpusched.io/pod-group: NAME`` (or scheduler-plugins'
``scheduling.x-k8s.io/pod-group``) in the group's namespace. :func:`parse_podgroup` validates what the CRD's
schema cannot: it raises :class:`InvalidObject` naming the field.

An *elastic* gang has a ``maxMember`` above its ``minMember``: its first ``minMember`` members (the core) are
placed together, the others (the surplus) one by one as room appears, never more than ``maxMember`` at once; the
surplus is what reclaim and preemption take first, the member of highest index first (:func:`member_rank`).

A gang in *segments* (``spec.segments``: ``size``, and ``required`` or ``preferred``, a topology level) has the
members it places together cut, lowest index first, into segments of ``size`` members, each inside one domain of
that level (KAI's segment size, Kueue's podset slices: a 64-worker job in slices of 16, each on one NVL72 rack).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.basics import fields, resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import ResourceList
from scheduler.api.crds import topology
from scheduler.api.crds.topology import TopologyConstraint

__all__ = ["PodGroup", "TopologyConstraint", "member_rank", "parse_compat_podgroup", "parse_podgroup"]

GROUP = "scheduling.gpusched.io"
VERSION = "v1alpha1"
PLURAL = "podgroups"
#: scheduler-plugins' PodGroup (kubernetes-sigs/scheduler-plugins apis/scheduling/v1alpha1), read as a gang too.
COMPAT_GROUP = "scheduling.x-k8s.io"
COMPAT_VERSION = "v1alpha1"
#: The fields of a scheduler-plugins PodGroup's spec that mean the same here.
COMPAT_FIELDS = ("minMember", "minResources", "scheduleTimeoutSeconds")
DEFAULT_TIMEOUT_S = 600

#: No segment level.
NO_SEGMENTS = topology.NO_CONSTRAINT

PHASES = ("Pending", "Scheduling", "Scheduled", "Running", "Unschedulable", "Failed")


@dataclass(frozen=True, slots=True)
class PodGroup:
    namespace: str
    name: str
    min_member: int = 1
    #: At most this many members placed at once (0: as many as exist); above ``min_member``, the gang is elastic.
    max_member: int = 0
    #: What the whole gang needs at least, checked against the cluster's free room before trying.
    min_resources: ResourceList = field(default_factory=dict)
    queue: str = ""
    priority_class_name: str = ""
    #: The value of ``priority_class_name``, resolved by whoever feeds the core (PriorityClass objects).
    priority: int = 0
    schedule_timeout_s: float = DEFAULT_TIMEOUT_S
    topology: TopologyConstraint = topology.NO_CONSTRAINT
    #: Members per segment (0: no segments), and the level each segment must or should stay inside.
    segment_size: int = 0
    segment_topology: TopologyConstraint = NO_SEGMENTS
    created: float = 0.0
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def elastic(self) -> bool:
        """Whether members beyond ``minMember`` may run (a maximum above it, or none at all)."""
        return self.max_member == 0 or self.max_member > self.min_member


def parse_podgroup(raw: Mapping[str, object], *, created: float = 0.0, priority: int = 0) -> PodGroup:
    """Parse a PodGroup object (a dict as the API server returns it)."""
    meta, spec, _, namespace, name, obj = fields.object_parts(
        raw, word="podgroup", kind="PodGroup", namespaced=True, with_status=False
    )
    min_member = spec.get("minMember", 1)
    if isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 1:
        raise InvalidObject(f"{min_member!r} is not an integer >= 1", obj=obj, field="spec.minMember")
    max_member = spec.get("maxMember", 0)
    if isinstance(max_member, bool) or not isinstance(max_member, int) or (max_member and max_member < min_member):
        raise InvalidObject(
            f"{max_member!r} is not an integer >= minMember ({min_member})", obj=obj, field="spec.maxMember"
        )
    timeout = spec.get("scheduleTimeoutSeconds", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise InvalidObject(
            f"{timeout!r} is not a positive number of seconds", obj=obj, field="spec.scheduleTimeoutSeconds"
        )
    min_resources = resources.parse_resource_list(spec.get("minResources"), obj=obj, field="spec.minResources")
    queue = spec.get("queue") or ""
    if not isinstance(queue, str):
        raise InvalidObject(f"{queue!r} is not a queue name", obj=obj, field="spec.queue")
    priority_class = spec.get("priorityClassName") or ""
    if not isinstance(priority_class, str):
        raise InvalidObject(f"{priority_class!r} is not a name", obj=obj, field="spec.priorityClassName")
    topology_raw = spec.get("topology") or {}
    if not isinstance(topology_raw, Mapping):
        raise InvalidObject("must be a map with required and/or preferred", obj=obj, field="spec.topology")
    for key in topology_raw:
        if key not in ("required", "preferred"):
            raise InvalidObject("unknown key (expected required, preferred)", obj=obj, field=f"spec.topology.{key}")
    constraint = _levels(topology_raw, obj=obj, at="spec.topology")
    segment_size, segment_topology = _segments(spec.get("segments"), obj=obj)
    return PodGroup(
        namespace=namespace,
        name=name,
        min_member=min_member,
        max_member=max_member,
        segment_size=segment_size,
        segment_topology=segment_topology,
        min_resources=min_resources,
        queue=queue,
        priority_class_name=priority_class,
        priority=priority,
        schedule_timeout_s=float(timeout),
        topology=constraint,
        created=created,
        uid=str(meta.get("uid") or ""),
    )


def _levels(raw: Mapping[str, object], *, obj: str, at: str) -> TopologyConstraint:
    """The ``required`` and ``preferred`` levels of the map at field ``at``."""
    return topology.parse_constraint(
        raw.get("required"),
        raw.get("preferred"),
        obj=obj,
        required_field=f"{at}.required",
        preferred_field=f"{at}.preferred",
    )


def _segments(raw: object, *, obj: str) -> tuple[int, TopologyConstraint]:
    """``spec.segments``: a size and the level each segment stays inside (required or preferred)."""
    if raw is None:
        return 0, topology.NO_CONSTRAINT
    if not isinstance(raw, Mapping):
        raise InvalidObject("must be a map with size and required or preferred", obj=obj, field="spec.segments")
    for key in raw:
        if key not in ("size", "required", "preferred"):
            raise InvalidObject(
                "unknown key (expected size, required, preferred)", obj=obj, field=f"spec.segments.{key}"
            )
    size = raw.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidObject(f"{size!r} is not an integer >= 1", obj=obj, field="spec.segments.size")
    constraint = _levels(raw, obj=obj, at="spec.segments")
    if bool(constraint.required) == bool(constraint.preferred):
        raise InvalidObject("a segment needs one level: required or preferred", obj=obj, field="spec.segments")
    return size, constraint


def parse_compat_podgroup(raw: Mapping[str, object], *, created: float = 0.0) -> PodGroup:
    """Parse a scheduler-plugins PodGroup (``scheduling.x-k8s.io/v1alpha1``): its ``minMember``,
    ``scheduleTimeoutSeconds`` and ``minResources``; it names no queue or topology (the default queue, no
    constraint). scheduler-plugins reads a missing or zero ``minMember`` as a gang of one, and so does this."""
    spec = raw.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InvalidObject("spec must be a map", obj="podgroup")
    kept = {key: spec[key] for key in COMPAT_FIELDS if spec.get(key) is not None}
    if kept.get("minMember") == 0:
        del kept["minMember"]
    return parse_podgroup({**raw, "spec": kept}, created=created)


#: Pod labels that number a member within its workload, read in this order (the first is the coarsest): JobSet's
#: Job across the whole JobSet, then the member within its Job, Kubeflow replica, LeaderWorkerSet group or
#: StatefulSet.
INDEX_LABELS = (
    "jobset.sigs.k8s.io/job-global-index",
    "batch.kubernetes.io/job-completion-index",
    "training.kubeflow.org/replica-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
    "apps.kubernetes.io/pod-index",
)
#: Kubeflow's replica types that lead their job (rank 0 before the workers of the same index).
LEADING_ROLES = frozenset({"master", "launcher", "chief", "leader"})


def member_rank(labels: Mapping[str, str], name: str) -> tuple[int, ...]:
    """Where a member stands in its gang: lower goes first into the core and leaves last. The workload's indices
    (:data:`INDEX_LABELS`, a leading Kubeflow role before the workers), then the name's trailing number; a
    member without any counts after those with one."""
    rank: list[int] = []
    role = str(labels.get("training.kubeflow.org/replica-type", "")).lower()
    rank.append(0 if role in LEADING_ROLES or not role else 1)
    for label in INDEX_LABELS:
        value = str(labels.get(label, ""))
        rank.append(int(value) if value.isdigit() else -1)
    digits = len(name) - len(name.rstrip("0123456789"))
    rank.append(int(name[-digits:]) if digits else 1 << 62)
    return tuple(rank)
