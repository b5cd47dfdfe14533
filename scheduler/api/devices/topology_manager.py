"""The kubelet's Topology Manager, replayed: would this node's NUMA zones admit this pod, and which zones would it use.

A node's kubelet asks its hint providers for each container (scope ``container``) or for the pod (scope ``pod``)
where its resources could come from, merges the answers, and admits or refuses by its policy. This module does the
same on the zones a NodeResourceTopology publishes (:class:`scheduler.api.devices.numa.NodeZones`), so that the
scheduler
never binds a pod the kubelet would refuse with ``TopologyAffinityError``, and knows which zones the pod takes.

What is aligned (the hint providers, as the kubelet has them):

- devices (``nvidia.com/gpu``, RDMA NICs: any resource a zone lists other than cpu, memory and hugepages): for every
  pod (the device manager);
- CPUs: for a Guaranteed pod asking for whole CPUs (the CPU manager's static policy), else the shared pool;
- memory and hugepages: for a Guaranteed pod (the memory manager's static policy).

A resource no zone lists is not NUMA-aware on the node: its provider does not care where it comes from.

Hints. For a resource asked ``r``, every non-empty set of zones (a bit mask, zone ``i`` is bit ``i``) whose
available amounts sum to ``r`` or more is a hint; a hint is *preferred* if it has as few zones as the least that
could ever hold ``r`` (counted on capacity, reserved CPUs included, as the CPU and device managers count it, not on
what is free). No set holding it: no hint at all.

Merge. One hint per resource, every combination: the zones they share (AND), preferred if every one is; the best
is a preferred one over a non-preferred one, then the narrowest (fewest zones, then the lowest numbered). Between
non-preferred ones the kubelet steers towards the widest of the resources' narrowest hints
(``bestNonPreferredAffinityCount``). ``single-numa-node`` first keeps only preferred hints of one zone.

Admission. ``best-effort`` admits every pod (the hint only steers allocation), ``restricted`` only if the best hint
is preferred, ``single-numa-node`` only if a preferred hint of one zone was left (or nothing is aligned).

It lives among the types because it is a model of another component, not a choice of the scheduler's (as
:mod:`scheduler.api.devices.cel` evaluates CEL as the API server does): the cache replays it to count what each pod
takes of
its node's zones (``scheduler.cache.numa_store``), the ``numa`` filter to refuse the nodes the kubelet would.

Scope ``container``: init containers are each judged on the zones as they are (they run before the others and
their CPUs are handed on), then the app containers one after another, each taking from what the previous left.
Scope ``pod``: the pod's effective requests judged once.

Cost. The ``numa`` filter asks this for every node with room, for every pod, so answers are remembered: the answer is
a function of the policy, the pod's aligned asks and the zones' capacity and free amounts of only the resources
asked, and a cluster's nodes repeat few such states, its pods few shapes (:func:`admit`'s ``memo``;
:class:`PodReplay` reads a pod once for many nodes). The replay without the memo stays, as the reference it is tested
against.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.api.basics import quantity, resources
from scheduler.api.devices import numa

if TYPE_CHECKING:
    from scheduler.api.devices.gputopo import GpuTopology
    from scheduler.api.objects.pod import PodRequest

#: ``status.reason`` of a pod the kubelet refused because its Topology Manager could not align it.
TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
#: Resources of the memory manager (``hugepages-*`` too).
MEMORY = resources.MEMORY
_HUGEPAGES = "hugepages-"


@dataclass(frozen=True, slots=True)
class Hint:
    """Where a resource (or a container's resources together) could come from: zone bits (None: anywhere, the
    provider does not care or cannot place it at all), and whether that is as few zones as it could ever take."""

    mask: int | None
    preferred: bool


@dataclass(frozen=True, slots=True)
class Merged:
    """The resources' hints merged: the zones they share, and whether every one of them was preferred."""

    mask: int
    preferred: bool


@dataclass(frozen=True, slots=True)
class Admission:
    """The Topology Manager's answer for a pod on one node."""

    admitted: bool
    #: Amounts taken per zone index (aligned resources only), as the kubelet's allocation would take them.
    taken: tuple[Mapping[str, int], ...]
    #: Why the pod was refused ("" if admitted), in kube-scheduler's message style.
    why: str = ""


def _bits(mask: int) -> int:
    return mask.bit_count()


def _masks(n: int) -> Iterator[int]:
    """Every non-empty set of ``n`` zones, fewest zones first, then lowest numbered (the kubelet's order)."""
    for size in range(1, n + 1):
        for combo in itertools.combinations(range(n), size):
            yield sum(1 << i for i in combo)


def aligned(name: str, *, guaranteed: bool, whole_cpus: bool) -> bool:
    """Whether resource ``name`` of a pod is placed by a hint provider (see the module's first lines)."""
    if name == resources.CPU:
        return guaranteed and whole_cpus
    if name == MEMORY or name.startswith(_HUGEPAGES):
        return guaranteed
    return name not in (resources.PODS, "ephemeral-storage")


def hints(amount: int, capacity: Sequence[int], available: Sequence[int]) -> list[Hint] | None:
    """A resource's hints on zones of ``capacity`` with ``available`` left; None: no zone lists it (no preference)."""
    if not any(capacity):
        return None
    masks = list(_masks(len(capacity)))
    fits_ever = [m for m in masks if sum(c for i, c in enumerate(capacity) if m >> i & 1) >= amount]
    if not fits_ever:
        return []
    least = min(_bits(m) for m in fits_ever)
    return [
        Hint(m, _bits(m) == least) for m in masks if sum(a for i, a in enumerate(available) if m >> i & 1) >= amount
    ]


def _narrower(a: int, b: int) -> bool:
    return (_bits(a), a) < (_bits(b), b)


def _better(best: Merged | None, candidate: Merged, target: int) -> bool:
    """The kubelet's ``compareHints``: whether ``candidate`` replaces ``best``."""
    if best is None:
        return True
    if candidate.preferred != best.preferred:
        return candidate.preferred
    if candidate.preferred:
        return _narrower(candidate.mask, best.mask)
    # Both not preferred: as close to ``target`` zones as possible without going over it.
    have, new = _bits(best.mask), _bits(candidate.mask)
    if have > target:
        return new < have or (new == have and _narrower(candidate.mask, best.mask))
    if have == target:
        return new == target and _narrower(candidate.mask, best.mask)
    if new > target:
        return False
    if new == target:
        return True
    return new > have or (new == have and _narrower(candidate.mask, best.mask))


def merge(per_resource: Iterable[list[Hint] | None], zones: int, policy: numa.Policy) -> Merged:
    """The best hint of the resources' hints (None: the resource does not care) under ``policy``."""
    everything = (1 << zones) - 1
    lists: list[list[Hint]] = []
    for found in per_resource:
        if found is None:
            lists.append([Hint(None, True)])
        elif not found:
            lists.append([Hint(None, False)])
        else:
            lists.append(found)
    if policy == numa.Policy.SINGLE_NUMA_NODE:
        lists = [[h for h in hs if h.preferred and (h.mask is None or _bits(h.mask) == 1)] for hs in lists]
        # A resource that cares and lost every hint of one zone leaves no combination: refused below.
    target = 0
    for hs in lists:
        narrowest = min((_bits(h.mask) for h in hs if h.mask is not None), default=zones)
        target = max(target, narrowest)
    best: Merged | None = None
    for combo in itertools.product(*lists):
        mask = everything
        for h in combo:
            mask &= everything if h.mask is None else h.mask
        if not mask:
            continue
        candidate = Merged(mask, all(h.preferred for h in combo))
        if _better(best, candidate, target):
            best = candidate
    return best if best is not None else Merged(everything, False)


def _best(
    ask: Mapping[str, int], policy: numa.Policy, capacity: Sequence[Mapping[str, int]], available: list[dict[str, int]]
) -> Merged:
    names = sorted(ask)
    per_resource = [
        hints(ask[name], [c.get(name, 0) for c in capacity], [a.get(name, 0) for a in available]) for name in names
    ]
    return merge(per_resource, len(capacity), policy)


def _take(ask: Mapping[str, int], mask: int, available: list[dict[str, int]], taken: list[dict[str, int]]) -> None:
    """Take ``ask`` from the zones of ``mask`` first (lowest numbered first), the rest from the others."""
    order = [i for i in range(len(available)) if mask >> i & 1] + [
        i for i in range(len(available)) if not mask >> i & 1
    ]
    for name, amount in ask.items():
        left = amount
        for i in order:
            if left <= 0:
                break
            here = min(left, available[i].get(name, 0))
            if here > 0:
                available[i][name] = available[i].get(name, 0) - here
                taken[i][name] = taken[i].get(name, 0) + here
                left -= here


def _amount(name: str, amount: int) -> str:
    return f"{quantity.text(name, amount)} {name}"


def _refusal(
    ask: Mapping[str, int], policy: numa.Policy, capacity: Sequence[Mapping[str, int]], available: list[dict[str, int]]
) -> str:
    """Why the kubelet refuses ``ask``, naming only what its zones list (what no zone lists, no provider places)."""
    ask = {name: amount for name, amount in ask.items() if any(c.get(name) for c in capacity)}
    asked = ", ".join(_amount(name, amount) for name, amount in sorted(ask.items()))
    if policy == numa.Policy.SINGLE_NUMA_NODE:
        for name, amount in sorted(ask.items()):
            if not any(a.get(name, 0) >= amount for a in available):
                return f"no NUMA zone has {_amount(name, amount)} ({policy})"
        return f"no NUMA zone has {asked} together ({policy})"
    return f"no NUMA zones hold {asked} in as few zones as they need ({policy})"


#: A pod's aligned requests, one ask per container judged (or one for the pod), each as (resource, amount) pairs.
Asks = tuple[tuple[tuple[str, int], ...], ...]


def _aligned_asks(
    scope: numa.Scope,
    *,
    containers: Sequence[Mapping[str, int]],
    init_containers: Sequence[Mapping[str, int]],
    pod: Mapping[str, int] | None,
    guaranteed: bool,
) -> tuple[Asks, tuple[bool, ...]]:
    """What the Topology Manager judges of a pod under ``scope``, in order, and whether each ask takes from the zones
    (an init container's does not: it hands its resources on)."""
    every = list(init_containers) + list(containers)
    whole_cpus = all(c.get(resources.CPU, 0) % 1000 == 0 for c in every)

    def aligned_part(requests: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        return tuple(
            (name, amount)
            for name, amount in requests.items()
            if amount > 0 and aligned(name, guaranteed=guaranteed, whole_cpus=whole_cpus)
        )

    if scope == numa.Scope.POD:
        if pod is None:
            total: dict[str, int] = {}
            for c in containers:
                resources.add(total, c)
            for c in init_containers:
                resources.maximum(total, c)
            pod = total
        return (aligned_part(pod),), (True,)
    asks = tuple(aligned_part(c) for c in init_containers) + tuple(aligned_part(c) for c in containers)
    return asks, (False,) * len(init_containers) + (True,) * len(containers)


def _judge(
    policy: numa.Policy,
    capacity: Sequence[Mapping[str, int]],
    left: list[dict[str, int]],
    asks: Asks,
    consumes: tuple[bool, ...],
) -> Admission:
    """The admission of ``asks`` on zones of ``capacity`` with ``left`` free (taken from as the asks consume)."""
    taken: list[dict[str, int]] = [{} for _ in capacity]
    for pairs, consume in zip(asks, consumes, strict=True):
        if not pairs:
            continue
        ask = dict(pairs)
        best = _best(ask, policy, capacity, left)
        if not best.preferred and policy != numa.Policy.BEST_EFFORT:
            return Admission(False, tuple(taken), _refusal(ask, policy, capacity, left))
        if consume:
            _take(ask, best.mask, left, taken)
    return Admission(True, tuple(taken))


def _names(asks: Asks) -> tuple[str, ...]:
    return tuple(sorted({name for pairs in asks for name, _ in pairs}))


@functools.lru_cache(maxsize=1 << 16)
def _judged(
    policy: numa.Policy,
    names: tuple[str, ...],
    capacity: tuple[tuple[int, ...], ...],
    available: tuple[tuple[int, ...], ...],
    asks: Asks,
    consumes: tuple[bool, ...],
) -> Admission:
    """:func:`_judge` on the zones' amounts of only the resources the asks name (``names``), remembered: nothing else
    of the zones enters the answer, and a cluster's nodes repeat few such states and its pods few shapes."""
    return _judge(
        policy,
        [dict(zip(names, c, strict=True)) for c in capacity],
        [dict(zip(names, a, strict=True)) for a in available],
        asks,
        consumes,
    )


def _remembered(
    policy: numa.Policy,
    zones: Sequence[numa.Zone],
    free: Sequence[Mapping[str, int]],
    asks: Asks,
    consumes: tuple[bool, ...],
    names: tuple[str, ...],
) -> Admission:
    """:func:`_judged` on ``zones`` with ``free`` left, read for the resources ``names`` only."""
    return _judged(
        policy,
        names,
        tuple(tuple(z.capacity.get(name, 0) for name in names) for z in zones),
        tuple(tuple(a.get(name, 0) for name in names) for a in free),
        asks,
        consumes,
    )


def admit(
    node: numa.NodeZones,
    *,
    containers: Sequence[Mapping[str, int]],
    init_containers: Sequence[Mapping[str, int]] = (),
    pod: Mapping[str, int] | None = None,
    guaranteed: bool,
    available: Sequence[Mapping[str, int]] | None = None,
    memo: bool = True,
) -> Admission:
    """Whether ``node``'s kubelet admits a pod of these containers' requests (scheduler units), and what it takes of
    each zone. ``pod``: its effective requests (scope ``pod``; by default the containers' sum and the init
    containers' peak). ``available``: what each zone has left (by default what the object publishes; the caller
    passes its own accounting when the object lags). ``memo``: answer from (and remember in) a memo of the answers
    already given for the same policy, asks, and zones' amounts of the resources asked; the answer's ``taken`` may
    then be shared (read it, never change it). Without it the replay runs on the zones' whole figures: the
    reference the memo is tested against."""
    free = available if available is not None else [z.available for z in node.zones]
    if node.policy == numa.Policy.NONE or not node.zones:
        return Admission(True, tuple({} for _ in node.zones))
    asks, consumes = _aligned_asks(
        node.scope, containers=containers, init_containers=init_containers, pod=pod, guaranteed=guaranteed
    )
    if not memo:
        return _judge(node.policy, [z.capacity for z in node.zones], [dict(a) for a in free], asks, consumes)
    return _remembered(node.policy, node.zones, free, asks, consumes, _names(asks))


def policy_for(node: numa.NodeZones, ask: numa.PodAsk) -> numa.Policy:
    """The rule ``node`` applies to a pod of ``ask``: its kubelet's (the NodeResourceTopology's), or where that is
    ``none``, the one the pod asks for itself (Koordinator's annotation), or else the node's Koordinator label's: rules
    the kubelet does not enforce, kept by the scheduler."""
    if node.policy != numa.Policy.NONE:
        return node.policy
    if ask.policy is not None:
        return ask.policy
    return node.label_policy or node.policy


class PodReplay:
    """:func:`admit_pod` for one pod on many nodes (a filter's, a score's): the pod's requests are read once, and
    what the Topology Manager judges of them once per scope, so that each node costs only its zones' amounts of the
    resources asked and a look in the memo (:func:`admit`)."""

    __slots__ = ("_ask", "_by_scope", "_containers", "_init_containers")

    def __init__(self, pod: PodRequest) -> None:
        ask = pod.numa
        self._ask = ask
        containers: list[Mapping[str, int]] = [dict(c) for c in ask.containers]
        if ask.one_container:
            # Its one container's requests are the pod's: its resources and its device plugin's GPUs.
            own = {name: amount for name, amount in pod.resources.items() if name != resources.PODS}
            if pod.gpu.whole and not pod.resource_claims:
                own[resources.GPU] = pod.gpu.count
            containers = [own]
        self._containers = containers
        self._init_containers = [dict(c) for c in ask.init_containers]
        self._by_scope: dict[numa.Scope, tuple[Asks, tuple[bool, ...], tuple[str, ...]]] = {}

    def _asks(self, scope: numa.Scope) -> tuple[Asks, tuple[bool, ...], tuple[str, ...]]:
        found = self._by_scope.get(scope)
        if found is None:
            asks, consumes = _aligned_asks(
                scope,
                containers=self._containers,
                init_containers=self._init_containers,
                pod=None,
                guaranteed=self._ask.guaranteed,
            )
            found = asks, consumes, _names(asks)
            self._by_scope[scope] = found
        return found

    def policy(self, node: numa.NodeZones) -> numa.Policy:
        """:func:`policy_for` this pod on ``node``."""
        return policy_for(node, self._ask)

    def shape(self, node: numa.NodeZones) -> tuple[numa.Policy, Asks, tuple[bool, ...]]:
        """All of this pod that its admission on ``node`` depends on (with the zones' figures): pods of the same shape
        get the same answer on the same zones."""
        asks, consumes, _ = self._asks(node.scope)
        return policy_for(node, self._ask), asks, consumes

    def admit(self, node: numa.NodeZones, *, available: Sequence[Mapping[str, int]] | None = None) -> Admission:
        """:func:`admit_pod` of this pod on ``node``."""
        policy = policy_for(node, self._ask)
        if policy == numa.Policy.NONE or not node.zones:
            return Admission(True, tuple({} for _ in node.zones))
        asks, consumes, names = self._asks(node.scope)
        free = available if available is not None else [z.available for z in node.zones]
        return _remembered(policy, node.zones, free, asks, consumes, names)


def admit_pod(
    node: numa.NodeZones, pod: PodRequest, *, available: Sequence[Mapping[str, int]] | None = None
) -> Admission:
    """:func:`admit` for ``pod`` as :class:`scheduler.api.devices.numa.PodAsk` reads it, under :func:`policy_for`."""
    return PodReplay(pod).admit(node, available=available)


def zone_gpus(node: numa.NodeZones, topology: GpuTopology | None, count: int) -> list[list[int]]:
    """The GPU indices (``0..count-1``) of each zone of ``node`` (by zone index), as its device plugin reports each
    GPU's NUMA node to the kubelet: the ``gpusched.io/gpu-topology`` annotation's ``numa`` per GPU where it says
    one, else the GPUs numbered in zone order (zone 0's ``nvidia.com/gpu`` capacity first). A GPU of no zone
    (the annotation names a NUMA node no zone has) is in none."""
    of_number = {z.number: i for i, z in enumerate(node.zones)}
    out: list[list[int]] = [[] for _ in node.zones]
    if topology is not None and len(topology.gpus) == count and all(g.numa >= 0 for g in topology.gpus):
        for gpu in topology.gpus:
            at = of_number.get(gpu.numa)
            if at is not None:
                out[at].append(gpu.index)
        return out
    first = 0
    for i, zone in enumerate(node.zones):
        size = zone.capacity.get(resources.GPU, 0)
        out[i] = list(range(first, min(first + size, count)))
        first += size
    return out
