"""The judge of benchmarks/numa_peers.py: the kubelet's Topology Manager, replayed on the bindings a scheduler made.

A scheduler's binding is only as good as the kubelet's admission of it: on a node whose kubelet runs the Topology
Manager with ``single-numa-node`` or ``restricted``, a pod whose aligned resources cannot come from the zones the
policy allows is refused with ``TopologyAffinityError``. kwok's nodes admit everything, so the benchmark replays
every binding, in binding order, here, as the kubelet (pkg/kubelet/cm/topologymanager, Kubernetes 1.34) would:

- each hint provider gives, per resource it aligns, one hint per set of zones (a mask) whose free amount holds the
  request; a hint is *preferred* when its mask is as small as the smallest mask that could hold the request on the
  zones' capacity (the device manager and the CPU manager count so). Aligned: devices for every pod; whole CPUs
  (CPU manager, static policy) and memory (memory manager, static policy) for a Guaranteed pod only;
- the hints are merged over every combination of one hint per resource: masks ANDed, preferred if all were; the best
  is a preferred one before a non-preferred one, then the narrowest, then the lowest-numbered;
- ``single-numa-node`` first keeps only the preferred hints of one zone; ``restricted`` keeps them all; either admits
  the pod only if the best merged hint is preferred;
- an admitted pod takes its resources from the best hint's zones first, the zones with the least free first (the
  device manager's order; the CPU manager packs the same way), then, if need be, from the others.

Written apart from ``scheduler.api.devices.topology_manager`` on purpose: grading gpusched with its own replay would
grade it with itself. Pure Python, no I/O; tests/benchmarks/test_numa_oracle.py checks it on hand-made nodes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: The resources the CPU and memory managers align (only for a Guaranteed pod); any other resource a zone lists is
#: a device, aligned for every pod.
CPU = "cpu"
MEMORY = "memory"
POLICIES = ("single-numa-node", "restricted")


@dataclass(frozen=True, slots=True)
class Pod:
    """What the kubelet reads of a pod: each container's requests (cpu in whole CPUs, memory in MiB, devices in
    units) and whether it is Guaranteed."""

    name: str
    containers: tuple[Mapping[str, int], ...]
    guaranteed: bool = True


@dataclass(slots=True)
class Node:
    """A node's zones (zone i is NUMA node i): capacity per resource, and what is free now (changed by admissions)."""

    name: str
    policy: str
    capacity: list[dict[str, int]]
    free: list[dict[str, int]]
    #: ``container`` (each container aligned on its own) or ``pod`` (the pod's requests at once).
    scope: str = "container"

    @classmethod
    def of(
        cls,
        name: str,
        *,
        policy: str,
        capacity: Sequence[Mapping[str, int]],
        free: Sequence[Mapping[str, int]],
        scope: str = "container",
    ) -> Node:
        if policy not in POLICIES:
            raise ValueError(f"{name}: policy {policy!r}: the oracle judges {', '.join(POLICIES)}")
        if len(capacity) != len(free):
            raise ValueError(f"{name}: {len(capacity)} zones of capacity, {len(free)} of free")
        return cls(name, policy, [dict(z) for z in capacity], [dict(z) for z in free], scope)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The kubelet's answer to one binding."""

    pod: str
    node: str
    admitted: bool
    #: The zones of the best merged hint (empty when refused).
    zones: tuple[int, ...] = ()
    #: What the pod took of each zone, per resource (empty when refused).
    taken: tuple[Mapping[str, int], ...] = field(default=())


Mask = frozenset[int]
Hint = tuple[Mask | None, bool]  # (zones, preferred); None: any zone will do


def aligned(pod: Pod, request: Mapping[str, int], zones: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """The part of ``request`` the kubelet's hint providers align on this node: the devices its zones list, and whole
    CPUs and memory of a Guaranteed pod."""
    listed = {name for zone in zones for name in zone}
    out = {}
    for name, amount in request.items():
        if amount <= 0 or name not in listed:
            continue
        if name in (CPU, MEMORY) and not pod.guaranteed:
            continue
        out[name] = amount
    return out


def hints(resource: str, amount: int, node: Node) -> list[Hint]:
    """One provider's hints for ``amount`` of ``resource``: every mask whose free amount holds it, preferred when
    no smaller mask could hold it on capacity."""
    n = len(node.capacity)
    masks = [frozenset(c) for size in range(1, n + 1) for c in itertools.combinations(range(n), size)]
    could = [len(m) for m in masks if sum(node.capacity[i].get(resource, 0) for i in m) >= amount]
    if not could:
        return []
    smallest = min(could)
    return [(m, len(m) == smallest) for m in masks if sum(node.free[i].get(resource, 0) for i in m) >= amount]


def _value(mask: Mask) -> int:
    return sum(1 << i for i in mask)


def _better(candidate: tuple[Mask, bool], best: tuple[Mask, bool] | None) -> bool:
    if best is None:
        return True
    if candidate[1] != best[1]:
        return candidate[1]
    if len(candidate[0]) != len(best[0]):
        return len(candidate[0]) < len(best[0])
    return _value(candidate[0]) < _value(best[0])


def best_hint(request: Mapping[str, int], node: Node) -> tuple[Mask, bool] | None:
    """The merged hint the Topology Manager settles on for ``request`` (already the aligned part), or None when no
    combination leaves a zone (refused). A request with nothing to align gets every zone, preferred."""
    everything = frozenset(range(len(node.capacity)))
    providers: list[list[Hint]] = []
    for resource, amount in sorted(request.items()):
        given = hints(resource, amount, node) or [(None, False)]
        if node.policy == "single-numa-node":
            given = [h for h in given if h[1] and (h[0] is None or len(h[0]) == 1)]
        providers.append(given)
    best: tuple[Mask, bool] | None = None
    for combination in itertools.product(*providers):
        mask = everything
        for zones, _ in combination:
            mask = mask & zones if zones is not None else mask
        merged = (mask, all(preferred for _, preferred in combination))
        if mask and _better(merged, best):
            best = merged
    return best


def _take(node: Node, request: Mapping[str, int], mask: Mask) -> list[dict[str, int]]:
    taken: list[dict[str, int]] = [{} for _ in node.free]
    for resource, amount in request.items():
        order = sorted(range(len(node.free)), key=lambda i: (i not in mask, node.free[i].get(resource, 0), i))
        left = amount
        for i in order:
            got = min(left, node.free[i].get(resource, 0))
            if got:
                node.free[i][resource] -= got
                taken[i][resource] = taken[i].get(resource, 0) + got
                left -= got
    return taken


def admit(pod: Pod, node: Node) -> Verdict:
    """The kubelet's admission of ``pod`` on ``node``; an admitted pod's resources leave the node's free zones."""
    if node.scope == "pod":
        total: dict[str, int] = {}
        for container in pod.containers:
            for name, amount in container.items():
                total[name] = total.get(name, 0) + amount
        units: Iterable[Mapping[str, int]] = [total]
    else:
        units = pod.containers
    saved = [dict(z) for z in node.free]
    zones: set[int] = set()
    taken: list[dict[str, int]] = [{} for _ in node.free]
    for unit in units:
        request = aligned(pod, unit, node.capacity)
        best = best_hint(request, node) if request else (frozenset(range(len(node.free))), True)
        if best is None or not best[1]:
            node.free = saved  # the pod fails whole: what its earlier containers took is given back
            return Verdict(pod.name, node.name, admitted=False)
        zones |= best[0] if request else set()
        for i, got in enumerate(_take(node, request, best[0])):
            for name, amount in got.items():
                taken[i][name] = taken[i].get(name, 0) + amount
    return Verdict(pod.name, node.name, admitted=True, zones=tuple(sorted(zones)), taken=tuple(taken))


def would_admit(pod: Pod, node: Node) -> bool:
    """Whether the kubelet would admit ``pod`` on ``node`` now (the node is left as it was)."""
    trial = Node(node.name, node.policy, node.capacity, [dict(z) for z in node.free], node.scope)
    return admit(pod, trial).admitted


def replay(bindings: Iterable[tuple[Pod, str]], nodes: Mapping[str, Node]) -> list[Verdict]:
    """Every binding (pod, node name) in binding order, each admitted or refused on what the earlier ones left."""
    return [admit(pod, nodes[node]) for pod, node in bindings]
