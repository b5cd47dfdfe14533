"""Reservation: room held ahead of the pods that will use it (``scheduling.gpusched.io/v1alpha1``, namespaced).

A Reservation says what to hold (``spec.template``: a pod template, whose requests, GPUs included, and node rules
each of ``spec.replicas`` *ghost* pods has; with ``spec.topology`` the ghosts keep to one domain of a level, as a
PodGroup's members), who may use it (``spec.owners``: pods that a label selector selects, pods whose controller is
a given object, or the members of a PodGroup, all in the Reservation's namespace), until when (``spec.ttlSeconds``
from its creation, or ``spec.expires``; neither: until it is deleted), whether it ends with its first user
(``spec.allocateOnce``) and the Queue it counts in (``spec.queue``). The scheduler places the ghosts as it would
place the pods (:func:`ghosts`: the same parse, so the same filters and scores) and holds their room
(``scheduler.core.reservations``).

:func:`parse_reservation` validates what the CRD's schema cannot and raises :class:`InvalidObject` naming the
Reservation and the field; it also reads back the status the scheduler wrote (phase, nodes), which is how a
Reservation survives a restart or a change of leader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.basics import fields, resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.basics.resources import ResourceList
from scheduler.api.crds import topology
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects import affinity as api_affinity
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects.affinity import LabelSelector
from scheduler.api.objects.pod import PodRequest

GROUP = "scheduling.gpusched.io"
VERSION = "v1alpha1"
PLURAL = "reservations"
KIND = "Reservation"

PENDING = "Pending"
AVAILABLE = "Available"
SUCCEEDED = "Succeeded"
EXPIRED = "Expired"
FAILED = "Failed"
PHASES = (PENDING, AVAILABLE, SUCCEEDED, EXPIRED, FAILED)
#: Phases after which a Reservation holds nothing again.
FINAL = (SUCCEEDED, EXPIRED, FAILED)

MAX_REPLICAS = 10000
#: What each kind of owner is called in ``spec.owners[i]``.
OWNER_KEYS = ("labelSelector", "object", "podGroup")


@dataclass(frozen=True, slots=True)
class Owner:
    """One rule of ``spec.owners``: a pod it names may use the room (exactly one of the three is set)."""

    selector: LabelSelector | None = None
    #: An owner reference: the kind and name of the pod's controller (``Job``/``train``).
    kind: str = ""
    name: str = ""
    pod_group: str = ""

    def owns(self, pod: PodRequest) -> bool:
        if self.selector is not None:
            return self.selector.matches(pod.labels)
        if self.pod_group:
            return pod.pod_group == self.pod_group
        return pod.owner_kind == self.kind and pod.owner_name == self.name


@dataclass(frozen=True, slots=True)
class Reservation:
    namespace: str
    name: str
    uid: str = ""
    #: The pod template's ``metadata`` and ``spec`` (what each ghost is parsed from, :func:`ghosts`).
    template: Mapping[str, object] = field(default_factory=dict)
    replicas: int = 1
    topology: TopologyConstraint = topology.NO_CONSTRAINT
    owners: tuple[Owner, ...] = ()
    #: Seconds it lasts from its creation (None: see ``expires``).
    ttl_s: float | None = None
    #: When it ends (Unix seconds; None: see ``ttl_s``; both None: until deleted).
    expires: float | None = None
    allocate_once: bool = False
    queue: str = ""
    created: float = 0.0
    #: What the scheduler last wrote: its phase and the nodes it holds (one per ghost, in order).
    phase: str = PENDING
    nodes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def until(self) -> float | None:
        """When it expires (Unix seconds), None: never."""
        if self.expires is not None:
            return self.expires
        if self.ttl_s is not None:
            return self.created + self.ttl_s
        return None

    def owns(self, pod: PodRequest) -> bool:
        """Whether ``pod`` may use the room (a pod of its namespace that one of ``owners`` names)."""
        return pod.namespace == self.namespace and any(owner.owns(pod) for owner in self.owners)


def parse_reservation(raw: Mapping[str, object], *, scheduler_name: str = api_pod.SCHEDULER_NAME) -> Reservation:
    """Parse a Reservation (a dict as the API server returns it); its template is parsed as its ghosts' pods are
    (:func:`ghosts`), so that a template the scheduler could not place is refused here, naming the field."""
    meta, spec, status, namespace, name, obj = fields.object_parts(raw, word="reservation", kind=KIND, namespaced=True)
    template = fields.mapping(spec.get("template"), obj=obj, field="spec.template")
    if not template.get("spec"):
        raise InvalidObject("a Reservation needs a pod template with a spec", obj=obj, field="spec.template.spec")
    replicas = spec.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidObject(f"{replicas!r} is not an integer from 1 to {MAX_REPLICAS}", obj=obj, field="spec.replicas")
    topology_raw = fields.mapping(spec.get("topology"), obj=obj, field="spec.topology")
    for key in topology_raw:
        if key not in ("required", "preferred"):
            raise InvalidObject("unknown key (expected required, preferred)", obj=obj, field=f"spec.topology.{key}")
    constraint = topology.parse_constraint(
        topology_raw.get("required"),
        topology_raw.get("preferred"),
        obj=obj,
        required_field="spec.topology.required",
        preferred_field="spec.topology.preferred",
    )
    owners = tuple(
        _owner(entry, obj=obj, at=at) for at, entry in fields.maps(spec.get("owners"), obj=obj, field="spec.owners")
    )
    if not owners:
        raise InvalidObject("a Reservation needs at least one owner", obj=obj, field="spec.owners")
    ttl = spec.get("ttlSeconds")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0):
        raise InvalidObject(f"{ttl!r} is not a positive number of seconds", obj=obj, field="spec.ttlSeconds")
    expires_raw = spec.get("expires")
    expires = None
    if expires_raw is not None:
        expires = fields.unix_time(expires_raw)
        if not expires:
            raise InvalidObject(f"{expires_raw!r} is not an RFC 3339 time", obj=obj, field="spec.expires")
    if ttl is not None and expires is not None:
        raise InvalidObject("set ttlSeconds or expires, not both", obj=obj, field="spec.expires")
    allocate_once = spec.get("allocateOnce", False)
    if not isinstance(allocate_once, bool):
        raise InvalidObject(f"{allocate_once!r} is not true or false", obj=obj, field="spec.allocateOnce")
    queue = fields.string(spec.get("queue"), obj=obj, field="spec.queue")
    phase = status.get("phase") or PENDING
    if phase not in PHASES:
        phase = PENDING  # a status someone else wrote: the scheduler writes its own again
    nodes = tuple(str(n) for n in fields.sequence(status.get("nodes"), obj=obj, field="status.nodes"))
    reservation = Reservation(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        template=template,
        replicas=replicas,
        topology=constraint,
        owners=owners,
        ttl_s=None if ttl is None else float(ttl),
        expires=expires,
        allocate_once=allocate_once,
        queue=queue,
        created=fields.unix_time(meta.get("creationTimestamp")),
        phase=str(phase),
        nodes=nodes,
    )
    ghosts(reservation, scheduler_name=scheduler_name)
    return reservation


def _owner(raw: Mapping[str, object], *, obj: str, at: str) -> Owner:
    present = [key for key in OWNER_KEYS if raw.get(key) is not None]
    unknown = [key for key in raw if key not in OWNER_KEYS]
    if unknown:
        raise InvalidObject(
            f"unknown key (expected one of {', '.join(OWNER_KEYS)})", obj=obj, field=f"{at}.{unknown[0]}"
        )
    if len(present) != 1:
        raise InvalidObject(f"an owner is exactly one of {', '.join(OWNER_KEYS)}", obj=obj, field=at)
    (key,) = present
    if key == "labelSelector":
        selector = api_affinity.parse_label_selector(raw[key], obj=obj, field=f"{at}.labelSelector")
        if not selector.requirements:
            raise InvalidObject("an empty selector would let every pod in", obj=obj, field=f"{at}.labelSelector")
        return Owner(selector=selector)
    if key == "podGroup":
        return Owner(pod_group=fields.string(raw[key], obj=obj, field=f"{at}.podGroup", required=True))
    ref = fields.mapping(raw[key], obj=obj, field=f"{at}.object")
    kind = fields.string(ref.get("kind"), obj=obj, field=f"{at}.object.kind", required=True)
    name = fields.string(ref.get("name"), obj=obj, field=f"{at}.object.name", required=True)
    return Owner(kind=kind, name=name)


def ghost_name(reservation: Reservation, index: int) -> str:
    """The name of ghost ``index`` (its key is ``namespace/ghost_name``; no pod has it: ``:`` is not allowed in a
    pod's name)."""
    return f"reservation:{reservation.name}:{index}"


def ghosts(reservation: Reservation, *, scheduler_name: str = api_pod.SCHEDULER_NAME) -> tuple[PodRequest, ...]:
    """The ghost pods the Reservation holds room for: its template parsed as a pod of ours would be (so the same
    requests, GPUs, node rules; the same refusals, named as the template's fields)."""
    meta = reservation.template.get("metadata") or {}
    spec = reservation.template.get("spec") or {}
    obj = f"reservation {reservation.key}"
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise InvalidObject("metadata and spec must be maps", obj=obj, field="spec.template")
    if spec.get("nodeName"):
        raise InvalidObject("a template may not name a node", obj=obj, field="spec.template.spec.nodeName")
    made = []
    for index in range(reservation.replicas):
        raw = {
            "metadata": {
                "namespace": reservation.namespace,
                "name": ghost_name(reservation, index),
                "labels": meta.get("labels") or {},
                "annotations": meta.get("annotations") or {},
            },
            "spec": {**spec, "schedulerName": scheduler_name},
        }
        try:
            made.append(api_pod.parse_pod(raw, scheduler_name=scheduler_name))
        except InvalidObject as error:
            raise error.located(obj=obj, prefix="spec.template") from None
        if index == 0 and not made[0].gpu.count and not any(r != "pods" for r in made[0].resources):
            raise InvalidObject("the template asks for nothing to hold", obj=obj, field="spec.template.spec")
    return tuple(made)


def held(reservation: Reservation, *, scheduler_name: str = api_pod.SCHEDULER_NAME) -> ResourceList:
    """What the whole Reservation holds, in scheduler units (its ghosts' requests summed, GPUs as
    ``nvidia.com/gpu``)."""
    total: ResourceList = {}
    for ghost in ghosts(reservation, scheduler_name=scheduler_name):
        for name, amount in ghost.resources.items():
            total[name] = total.get(name, 0) + amount
        if ghost.gpu.count:
            total[resources.GPU] = total.get(resources.GPU, 0) + ghost.gpu.count
    return total
