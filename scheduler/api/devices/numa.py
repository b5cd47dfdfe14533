"""A node's NUMA zones as its NodeResourceTopology object publishes them, and the Topology Manager rule they carry.

The kubelet's Topology Manager admits a pod on a node only if the node's NUMA zones can give it CPUs, memory and
devices aligned as its policy says; a pod bound where they cannot is refused with ``TopologyAffinityError``. The
zones are published as ``NodeResourceTopology`` objects (``topology.node.k8s.io/v1alpha2``, one per node, named as
the node, cluster-scoped), by NFD's topology-updater or the resource-topology-exporter: each zone of type ``Node``
(one NUMA node) lists, per resource, its ``capacity``, ``allocatable`` and ``available`` amounts, and the object's
``attributes`` say the kubelet's ``topologyManagerPolicy`` and ``topologyManagerScope`` (older agents write only the
deprecated ``topologyPolicies``, such as ``SingleNUMANodeContainerLevel``). Agents that fingerprint the pods they
account for also say ``nodeTopologyPodsFingerprint``: a hash of the set of pods (namespace and name) whose resources
the figures show (the podfingerprint library's ``pfp0v001`` format, ``scheduler.cache.numa_store.pods_fingerprint``;
read with the method ``all``, every pod running on the node), by which the scheduler knows which pods they show.

Amounts are in scheduler units (milli-CPU, bytes, devices), as :mod:`scheduler.api.basics.resources` reads them. A zone
is
known by its position in :attr:`NodeZones.zones` (zone ``node-1`` is NUMA node 1; zones are sorted by that number),
which is the bit it has in an affinity mask (:mod:`scheduler.api.devices.topology_manager`).

A pod may ask for a policy its node's kubelet does not enforce with Koordinator's annotation
:data:`KOORDINATOR_POD_SPEC` (``{"numaTopologyPolicy": "SingleNUMANode"}``, read into :class:`PodAsk`); the
NodeResourceTopology's own policy wins where both are there. A node's label :data:`KOORDINATOR_NODE_POLICY` (the same
names) gives its pods a policy its kubelet does not enforce, below the pod's annotation and the kubelet's own policy
(the kubelet's wins, as Koordinator has it; then the pod's, which asks for itself).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from scheduler.api.basics import fields, resources
from scheduler.api.basics.errors import InvalidObject

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
PLURAL = "noderesourcetopologies"
KIND = "NodeResourceTopology"

#: Koordinator's pod annotation asking for a NUMA policy.
KOORDINATOR_POD_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
#: Koordinator's node label giving a node's pods a NUMA policy (``SingleNUMANode``, ``Restricted``...).
KOORDINATOR_NODE_POLICY = "node.koordinator.sh/numa-topology-policy"
#: The attributes of the agents that fingerprint the pods their figures show, and the one method the scheduler reads.
FINGERPRINT = "nodeTopologyPodsFingerprint"
FINGERPRINT_METHOD = "nodeTopologyPodsFingerprintMethod"
FINGERPRINT_ALL = "all"


class Policy(enum.StrEnum):
    """The kubelet's ``--topology-manager-policy``."""

    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


class Scope(enum.StrEnum):
    """The kubelet's ``--topology-manager-scope``: each container aligned on its own, or the pod as a whole."""

    CONTAINER = "container"
    POD = "pod"


#: The deprecated ``topologyPolicies`` values: (policy, scope).
_LEGACY = {
    "None": (Policy.NONE, Scope.CONTAINER),
    "BestEffort": (Policy.BEST_EFFORT, Scope.CONTAINER),
    "Restricted": (Policy.RESTRICTED, Scope.CONTAINER),
    "SingleNUMANodeContainerLevel": (Policy.SINGLE_NUMA_NODE, Scope.CONTAINER),
    "SingleNUMANodePodLevel": (Policy.SINGLE_NUMA_NODE, Scope.POD),
    "BestEffortContainerLevel": (Policy.BEST_EFFORT, Scope.CONTAINER),
    "BestEffortPodLevel": (Policy.BEST_EFFORT, Scope.POD),
    "RestrictedContainerLevel": (Policy.RESTRICTED, Scope.CONTAINER),
    "RestrictedPodLevel": (Policy.RESTRICTED, Scope.POD),
}

#: The policies under which the kubelet refuses a pod its zones cannot hold (``best-effort`` only steers).
ENFORCED = frozenset({Policy.RESTRICTED, Policy.SINGLE_NUMA_NODE})

#: Koordinator's policy names.
_KOORDINATOR = {
    "": Policy.NONE,
    "None": Policy.NONE,
    "BestEffort": Policy.BEST_EFFORT,
    "Restricted": Policy.RESTRICTED,
    "SingleNUMANode": Policy.SINGLE_NUMA_NODE,
}

_ZONE_NUMBER = re.compile(r"(\d+)$")


@dataclass(frozen=True, slots=True)
class Zone:
    """One NUMA node of a node."""

    name: str
    #: The NUMA node's number (from the zone's name, ``node-1`` is 1).
    number: int
    capacity: Mapping[str, int] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    available: Mapping[str, int] = field(default_factory=dict)
    #: Distance to each zone by name (the ``costs`` list: 10 to itself by ACPI's convention).
    costs: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeZones:
    """A node's NUMA zones and the Topology Manager rule its kubelet applies."""

    node: str
    policy: Policy = Policy.NONE
    scope: Scope = Scope.CONTAINER
    zones: tuple[Zone, ...] = ()
    #: The policy the node's Koordinator label gives its pods (:data:`KOORDINATOR_NODE_POLICY`), kept by the
    #: scheduler where its kubelet enforces none; None: no label.
    label_policy: Policy | None = None
    #: The fingerprint of the pods running on the node that the figures show (:data:`FINGERPRINT`, method ``all``);
    #: None where the agent publishes none (or fingerprints only some of the pods: another method).
    pods_fingerprint: str | None = None

    @property
    def enforced(self) -> bool:
        """Whether the kubelet may refuse a pod for its zones (a policy other than ``none``, and zones to judge)."""
        return self.policy in ENFORCED and bool(self.zones)


def _attributes(raw: object, *, obj: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, item in enumerate(fields.sequence(raw, obj=obj, field=where)):
        entry = fields.mapping(item, obj=obj, field=f"{where}[{i}]")
        name = fields.string(entry.get("name"), obj=obj, field=f"{where}[{i}].name", required=True)
        out[name] = fields.string(entry.get("value"), obj=obj, field=f"{where}[{i}].value")
    return out


def _zone(raw: object, *, obj: str, where: str) -> Zone | None:
    entry = fields.mapping(raw, obj=obj, field=where)
    name = fields.string(entry.get("name"), obj=obj, field=f"{where}.name", required=True)
    if fields.string(entry.get("type"), obj=obj, field=f"{where}.type") != "Node":
        return None  # a zone of another kind (a cache, a core) is not a NUMA node
    number = _ZONE_NUMBER.search(name)
    if number is None:
        raise InvalidObject(f"zone name {name!r} does not end in its NUMA node number", obj=obj, field=f"{where}.name")
    amounts: dict[str, dict[str, int]] = {"capacity": {}, "allocatable": {}, "available": {}}
    for i, item in enumerate(fields.sequence(entry.get("resources"), obj=obj, field=f"{where}.resources")):
        res_where = f"{where}.resources[{i}]"
        res = fields.mapping(item, obj=obj, field=res_where)
        res_name = fields.string(res.get("name"), obj=obj, field=f"{res_where}.name", required=True)
        for kind, into in amounts.items():
            if res.get(kind) is None:
                raise InvalidObject(f"resource {res_name!r} has no {kind}", obj=obj, field=f"{res_where}.{kind}")
            into.update(resources.parse_resource_list({res_name: res[kind]}, obj=obj, field=f"{res_where}.{kind}"))
    costs: dict[str, int] = {}
    for i, item in enumerate(fields.sequence(entry.get("costs"), obj=obj, field=f"{where}.costs")):
        cost = fields.mapping(item, obj=obj, field=f"{where}.costs[{i}]")
        value = cost.get("value")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidObject(f"cost {value!r} is not a whole number", obj=obj, field=f"{where}.costs[{i}].value")
        costs[fields.string(cost.get("name"), obj=obj, field=f"{where}.costs[{i}].name", required=True)] = value
    return Zone(name, int(number.group(1)), amounts["capacity"], amounts["allocatable"], amounts["available"], costs)


E = TypeVar("E", Policy, Scope)


def _attribute(attributes: Mapping[str, str], name: str, kind: type[E], default: E, *, word: str, obj: str) -> E:
    """Attribute ``name`` as a member of ``kind`` (``default`` without it)."""
    if name not in attributes:
        return default
    try:
        return kind(attributes[name])
    except ValueError:
        raise InvalidObject(
            f"unknown {word} {attributes[name]!r} (one of {', '.join(kind)})", obj=obj, field=f"attributes[{name}]"
        ) from None


def parse_node_resource_topology(raw: Mapping[str, object]) -> NodeZones:
    """Parse a NodeResourceTopology object (a dict as the API server returns it).

    Raises :class:`InvalidObject` naming the object and the field for anything malformed: an unknown policy or
    scope, a zone without its number, a resource without an amount, a bad quantity."""
    meta = fields.mapping(raw.get("metadata"), obj="NodeResourceTopology", field="metadata")
    node = fields.string(meta.get("name"), obj="NodeResourceTopology", field="metadata.name", required=True)
    obj = f"noderesourcetopology {node}"
    policy, scope = Policy.NONE, Scope.CONTAINER
    legacy = fields.sequence(raw.get("topologyPolicies"), obj=obj, field="topologyPolicies")
    if legacy:
        value = legacy[0]
        if value not in _LEGACY:
            raise InvalidObject(f"unknown topology policy {value!r}", obj=obj, field="topologyPolicies[0]")
        policy, scope = _LEGACY[str(value)]
    attributes = _attributes(raw.get("attributes"), obj=obj, where="attributes")
    policy = _attribute(attributes, "topologyManagerPolicy", Policy, policy, word="policy", obj=obj)
    scope = _attribute(attributes, "topologyManagerScope", Scope, scope, word="scope", obj=obj)
    fingerprint = attributes.get(FINGERPRINT) or None
    if attributes.get(FINGERPRINT_METHOD, FINGERPRINT_ALL) != FINGERPRINT_ALL:
        fingerprint = None  # a fingerprint of some of the pods only: which ones is the agent's own rule
    zones = [
        zone
        for i, item in enumerate(fields.sequence(raw.get("zones"), obj=obj, field="zones"))
        if (zone := _zone(item, obj=obj, where=f"zones[{i}]")) is not None
    ]
    zones.sort(key=lambda z: z.number)
    numbers = [z.number for z in zones]
    if len(set(numbers)) != len(numbers):
        raise InvalidObject(f"two zones share a NUMA node number: {numbers}", obj=obj, field="zones")
    return NodeZones(node, policy, scope, tuple(zones), pods_fingerprint=fingerprint)


def koordinator_policy(value: str, *, obj: str, field: str) -> Policy:
    """A Koordinator policy name (``SingleNUMANode``, ``Restricted``, ``BestEffort``, ``None``) as a :class:`Policy`;
    the pod annotation's JSON (``{"numaTopologyPolicy": ...}``) or a bare name."""
    name = value.strip()
    if name.startswith("{"):
        try:
            spec = json.loads(name)
        except json.JSONDecodeError as err:
            raise InvalidObject(f"not JSON: {err.msg}", obj=obj, field=field) from None
        name = str(spec.get("numaTopologyPolicy", "")) if isinstance(spec, dict) else ""
    if name not in _KOORDINATOR:
        raise InvalidObject(
            f"unknown NUMA topology policy {name!r} (one of {', '.join(k for k in _KOORDINATOR if k)})",
            obj=obj,
            field=field,
        )
    return _KOORDINATOR[name]


#: A container's requests as the Topology Manager reads them: (resource, amount) pairs, sorted (hashable, so that
#: replicas keep one pod shape).
Requests = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What of a pod the Topology Manager aligns: each container's requests, whether the pod is Guaranteed, and the
    policy it asks for itself (Koordinator's annotation; None: none).

    A pod of one container (no init containers, no overhead), most pods, has :attr:`one_container` set and no
    requests here: its container's are the pod's own (``PodRequest.resources`` and ``gpu``), and such asks are shared
    (:func:`pod_ask`), so that parsing a pod makes no object for NUMA at all."""

    containers: tuple[Requests, ...] = ()
    init_containers: tuple[Requests, ...] = ()
    guaranteed: bool = False
    policy: Policy | None = None
    one_container: bool = False


#: A pod the Topology Manager has nothing to align for (the default of a pod made without a spec).
NO_ASK = PodAsk()


def _frozen_requests(requests: Mapping[str, int]) -> Requests:
    # In the spec's order: replicas have the same spec, so the same tuple (sorting or filtering cost every parse).
    return tuple(requests.items())


def guaranteed(containers: Sequence[resources.ContainerRequests], *, qos_class: str, obj: str) -> bool:
    """Whether the pod is of QoS class Guaranteed: ``status.qosClass`` when the API server has set it, else as it
    sets it: every container (init containers too) has CPU and memory limits, and its requests equal them."""
    if qos_class:
        return qos_class == "Guaranteed"
    for c in containers:
        res = c.container.get("resources")
        limits_raw = res.get("limits") if isinstance(res, dict) else None
        if (
            not isinstance(limits_raw, dict)
            or not limits_raw.get(resources.CPU)
            or not limits_raw.get(resources.MEMORY)
        ):
            return False  # most pods: no CPU or memory limit, nothing to parse
        limits = resources.parse_resource_list(
            {n: limits_raw[n] for n in (resources.CPU, resources.MEMORY)}, obj=obj, field="limits"
        )
        if any(not limits[n] or c.requests.get(n) != limits[n] for n in (resources.CPU, resources.MEMORY)):
            return False
    return bool(containers)


#: The shared asks of one-container pods, by (Guaranteed, policy asked).
_ONE_CONTAINER = {
    (g, p): PodAsk(guaranteed=g, policy=p, one_container=True) for g in (False, True) for p in (None, *Policy)
}


def pod_ask(
    containers: Sequence[resources.ContainerRequests],
    init_containers: Sequence[resources.ContainerRequests],
    *,
    qos_class: str,
    annotations: Mapping[str, str],
    overhead: bool,
    obj: str,
) -> PodAsk:
    """A pod's :class:`PodAsk` from its containers (sidecars among them) and init containers, ``status.qosClass``,
    its annotations, and whether its spec has an ``overhead`` (the pod's requests then are not its container's)."""
    spec = annotations.get(KOORDINATOR_POD_SPEC)
    where = f"metadata.annotations[{KOORDINATOR_POD_SPEC}]"
    policy = None if spec is None else koordinator_policy(spec, obj=obj, field=where)
    is_guaranteed = guaranteed((*init_containers, *containers), qos_class=qos_class, obj=obj)
    if len(containers) == 1 and not init_containers and not overhead:
        return _ONE_CONTAINER[(is_guaranteed, policy)]
    return PodAsk(
        containers=tuple(_frozen_requests(c.requests) for c in containers),
        init_containers=tuple(_frozen_requests(c.requests) for c in init_containers),
        guaranteed=is_guaranteed,
        policy=policy,
    )
