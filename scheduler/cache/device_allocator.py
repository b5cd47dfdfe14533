"""The DRA allocator: which devices of one node a pod's claims get, as kube-scheduler's structured allocator
chooses them (each request's devices, its constraints across requests, first-available alternatives, taints,
shared counters and capacity), trying each claim's choices in order and going back when a later claim cannot be
met (:data:`BACKTRACK_MAX` choices a node). ``scheduler.plugins.dra`` calls :func:`allocate` from its filter and
reserve.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from scheduler.api.devices import consumable_capacity as api_capacity
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import nvidia_gpus
from scheduler.api.devices.dra import AllocatedDevice, Device, ResourceClaim
from scheduler.cache.device_budgets import CapacityUse, CounterBudget, DeviceKey
from scheduler.cache.device_store import DeviceStore

#: The standard attribute of a device's PCIe root (a GPU goes with the NIC under the same root).
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: The names drivers give a device's NUMA node (in their own domain, ``<driver>/numaNode``, or any other).
NUMA_ATTRIBUTES = frozenset({"numa", "numaNode"})


def allocate(
    claims: Sequence[ResourceClaim],
    devices: Sequence[Device],
    taken: set[DeviceKey],
    store: DeviceStore,
    capacity: CapacityUse,
) -> dict[str, tuple[AllocatedDevice, ...]] | None:
    """Devices for every claim from ``devices`` (none of ``taken``, none whose shared counters are used up, shares
    of devices that allow multiple allocations within their ``capacity``); None if they cannot all be met. Claim
    after claim, each claim's choices in its order of preference, and when a later claim cannot be met, the earlier
    ones try their next choice (as kube-scheduler backtracks), up to :data:`BACKTRACK_MAX` choices in all."""
    used: set[DeviceKey] = set()
    budget = store.budget(taken)
    out: dict[str, tuple[AllocatedDevice, ...]] = {}
    tries = BACKTRACK_MAX

    def place(k: int) -> bool:
        nonlocal tries
        if k == len(claims):
            return True
        for result in _allocations(claims[k], devices, taken, used, store, budget, capacity):
            tries -= 1
            held = [d.key for d in result if not d.admin_access and not d.share_id]
            used.update(held)
            out[claims[k].key] = result
            if place(k + 1):
                return True
            used.difference_update(held)
            del out[claims[k].key]
            if tries <= 0:
                return False
        return False

    return out if place(0) else None


def numa_nodes(devices: Sequence[Device]) -> dict[DeviceKey, int]:
    """The NUMA node of each device that says one (an integer attribute of a name in :data:`NUMA_ATTRIBUTES`), or
    that shares its PCIe root with a device that says one (a PCIe root hangs off one NUMA node: NVIDIA's GPU driver
    publishes the root, an RDMA NIC's driver the root and the NUMA node)."""
    out: dict[DeviceKey, int] = {}
    of_root: dict[object, int] = {}
    for d in devices:
        for name, value in d.attributes.items():
            if name.rsplit("/", 1)[-1] in NUMA_ATTRIBUTES and isinstance(value, int) and not isinstance(value, bool):
                out[d.key] = value
                root = d.attribute(PCIE_ROOT)
                if root is not None:
                    of_root.setdefault(root, value)
                break
    for d in devices:
        root = d.attribute(PCIE_ROOT)
        if d.key not in out and root is not None and root in of_root:
            out[d.key] = of_root[root]
    return out


def allocate_in_one_zone(
    claims: Sequence[ResourceClaim],
    devices: Sequence[Device],
    taken: set[DeviceKey],
    store: DeviceStore,
    capacity: CapacityUse,
    *,
    zones: Sequence[int],
) -> dict[str, tuple[AllocatedDevice, ...]] | None:
    """:func:`allocate` with every device that has a NUMA node (:func:`numa_nodes`) in one zone, the ``zones`` (NUMA
    node numbers) tried in order, devices of no known NUMA node allowed with any; else across zones, as
    :func:`allocate` alone would (Koordinator's joint allocation of GPUs and RDMA NICs: one zone where it can)."""
    of = numa_nodes(devices)
    if of:
        for zone in zones:
            found = allocate(claims, [d for d in devices if of.get(d.key, zone) == zone], taken, store, capacity)
            if found is not None:
                return found
    return allocate(claims, devices, taken, store, capacity)


#: Choices tried for one pod's claims before the node is given up (backtracking across claims is exponential).
BACKTRACK_MAX = 64


def _allocations(
    claim: ResourceClaim,
    devices: Sequence[Device],
    taken: set[DeviceKey],
    used: set[DeviceKey],
    store: DeviceStore,
    budget: CounterBudget,
    capacity: CapacityUse,
) -> Iterator[tuple[AllocatedDevice, ...]]:
    """The ways to meet ``claim``, best first. While one is being looked at (between two ``next``), its devices
    are taken in ``budget`` (the shares of devices that allow multiple allocations in ``capacity``); they are given
    back before the next is made."""
    requests = claim.requests
    constraints = claim.constraints
    fixed: dict[int, object] = {}
    #: distinctAttribute constraint -> the values its devices have so far.
    seen: dict[int, list[object]] = {ci: [] for ci, c in enumerate(constraints) if c.distinct_attribute}
    chosen: list[AllocatedDevice] = []
    mine: set[DeviceKey] = set()

    def applies(index: int, request: str, choice: str) -> bool:
        named = constraints[index].requests
        return not named or request in named or choice in named

    def step(i: int) -> Iterator[tuple[AllocatedDevice, ...]]:
        if i == len(requests):
            yield tuple(chosen)
            return
        request = requests[i]
        for choice in request.choices:
            device_class = store.classes.get(choice.device_class)
            if device_class is None:
                continue
            applying = [ci for ci in range(len(constraints)) if applies(ci, request.name, choice.name)]
            bound = [ci for ci in applying if constraints[ci].match_attribute]
            attrs = [constraints[ci].match_attribute for ci in bound]
            distinct = [(ci, constraints[ci].distinct_attribute) for ci in applying if ci in seen]
            matching = [
                d
                for d in devices
                if choice.tolerates(d)
                and all(store.matches(e, d) for e in device_class.selectors)
                and all(store.matches(e, d) for e in choice.selectors)
                and all(d.attribute(a) is not None and d.attribute(a) not in seen[ci] for ci, a in distinct)
                and (not (choice.capacity or d.multiple) or capacity.consumption(choice, d) is not None)
            ]
            if choice.mode == api_dra.ALL:
                if not matching or len(matching) > api_dra.ALLOCATION_MAX:
                    continue
                if not choice.admin_access and (
                    any(d.key in taken or d.key in used or d.key in mine for d in matching)
                    or not budget.fits(matching[0], *matching[1:])
                ):
                    continue
                picks: Iterator[list[Device]] = iter([matching])
            else:
                busy = (taken, used, mine)  # a device that allows multiple allocations is never busy, only full
                free = [
                    d
                    for d in matching
                    if choice.admin_access or ((d.multiple or all(d.key not in b for b in busy)) and budget.fits(d))
                ]
                picks = _picks(
                    free,
                    choice.count,
                    [(a, fixed.get(ci)) for ci, a in zip(bound, attrs, strict=True)],
                    None if choice.admin_access else budget,
                    devices,
                    [a for _ci, a in distinct],
                )
            for pick in picks:
                values = [pick[0].attribute(a) if pick else None for a in attrs]
                if any(v is None for v in values) or any(
                    d.attribute(a) != v for d in pick for a, v in zip(attrs, values, strict=True)
                ):
                    continue
                if any(ci in fixed and fixed[ci] != v for ci, v in zip(bound, values, strict=True)):
                    continue
                if any(len({d.attribute(a) for d in pick}) < len(pick) for _ci, a in distinct):
                    continue
                admin = choice.admin_access
                holds = [] if admin else [d for d in pick if not d.multiple]
                if holds and not budget.fits(holds[0], *holds[1:]):
                    continue
                shares = {d.key: capacity.consumption(choice, d) for d in pick if d.multiple and not admin}
                newly = [ci for ci in bound if ci not in fixed]
                for ci, v in zip(bound, values, strict=True):
                    fixed.setdefault(ci, v)
                for ci, a in distinct:
                    seen[ci].extend(d.attribute(a) for d in pick)
                added = [
                    AllocatedDevice(
                        choice.name,
                        d.driver,
                        d.pool,
                        d.name,
                        choice.admin_access,
                        *api_capacity.share(shares.get(d.key)),
                    )
                    for d in pick
                ]
                chosen.extend(added)
                keys = [d.key for d in holds]
                mine.update(keys)
                budget.take(holds)
                for key, consumed in shares.items():
                    capacity.take(key, consumed or {})
                yield from step(i + 1)
                for key, consumed in shares.items():
                    capacity.give(key, consumed or {})
                budget.give(holds)
                del chosen[len(chosen) - len(added) :]
                mine.difference_update(keys)
                for ci in newly:
                    del fixed[ci]
                for ci, _a in distinct:
                    del seen[ci][len(seen[ci]) - len(pick) :]
            # The first alternative that can be met is the one taken (firstAvailable); else the next is tried.

    yield from step(0)


def _picks(
    free: list[Device],
    count: int,
    constraints: list[tuple[str, object]],
    budget: CounterBudget | None,
    reach: Sequence[Device] = (),
    distinct: Sequence[str] = (),
) -> Iterator[list[Device]]:
    """The device sets a request may take, best first: by constraint value if constrained, else the tightest;
    under ``distinct`` attributes, devices that each have a value of them no other device of the set has."""
    if len(free) < count:
        return
    if distinct and count > 1:
        pick = _distinct_pick(free, count, distinct, budget)
        if len(pick) == count:
            yield pick
        return
    for attribute, value in constraints:
        if value is not None:
            free = [d for d in free if d.attribute(attribute) == value]
    unfixed = [a for a, v in constraints if v is None]
    if unfixed:
        groups: dict[tuple[object, ...], list[Device]] = {}
        for d in free:
            key = tuple(d.attribute(a) for a in unfixed)
            if None not in key:
                groups.setdefault(key, []).append(d)
        for group in sorted(groups.values(), key=lambda g: (len(g), nvidia_gpus.gpu_order(g[0]))):
            if len(group) >= count:
                pick = _tightest(group, count, budget, reach)
                if len(pick) == count:
                    yield pick
        return
    if len(free) >= count:
        pick = _tightest(free, count, budget, reach)
        if len(pick) == count:
            yield pick


def _tightest(
    free: list[Device], count: int, budget: CounterBudget | None = None, reach: Sequence[Device] = ()
) -> list[Device]:
    """``count`` devices from as few PCIe roots as possible, the fullest root that can hold them all first; for
    partitionable devices, one at a time the one that keeps the most room (:func:`_keeps_room`). Fewer than
    ``count`` when the shared counters cannot hold that many. ``reach`` is every device the node reaches."""
    if budget is not None and any(d.consumes for d in free):
        return _keeps_room(free, count, budget, reach)
    roots: dict[object, list[Device]] = {}
    for d in sorted(free, key=nvidia_gpus.gpu_order):
        roots.setdefault(d.attribute(PCIE_ROOT), []).append(d)
    fitting = [g for g in roots.values() if len(g) >= count]
    if fitting:
        return min(fitting, key=lambda g: (len(g), nvidia_gpus.gpu_order(g[0])))[:count]
    out: list[Device] = []
    for group in sorted(roots.values(), key=lambda g: (-len(g), nvidia_gpus.gpu_order(g[0]))):
        out.extend(group[: count - len(out)])
        if len(out) == count:
            break
    return out


def _distinct_pick(
    free: list[Device], count: int, distinct: Sequence[str], budget: CounterBudget | None
) -> list[Device]:
    """``count`` devices, in GPU order, each with values of the ``distinct`` attributes none of the others has
    (fewer when there are not that many, or the shared counters cannot hold them)."""
    out: list[Device] = []
    values: list[set[object]] = [set() for _ in distinct]
    for d in sorted(free, key=nvidia_gpus.gpu_order):
        mine = [d.attribute(a) for a in distinct]
        if any(v in vs for v, vs in zip(mine, values, strict=True)):
            continue
        if budget is not None and not budget.fits(d, *out):
            continue
        out.append(d)
        for v, vs in zip(mine, values, strict=True):
            vs.add(v)
        if len(out) == count:
            break
    return out


def _keeps_room(free: list[Device], count: int, budget: CounterBudget, reach: Sequence[Device]) -> list[Device]:
    """Partitions (MIG placements) chosen as FGD chooses nodes, inside a GPU: the partition goes to the fullest
    counter set (GPU) it fits, so that untouched GPUs stay whole for full-GPU and large profiles; on that GPU, to
    the placement after which the other placements still possible there are the largest (a 1g slice at the edge of
    the memory slices rather than in the middle, where it would rule out the 4g and 3g placements)."""
    out: list[Device] = []
    sharing: dict[tuple[str, str, str], list[Device]] = {}
    for d in reach or free:
        for set_name, _counters in d.consumes:
            sharing.setdefault((d.driver, d.pool, set_name), []).append(d)
    for _ in range(count):
        best: Device | None = None
        best_key: tuple[float, float, tuple[object, ...]] | None = None
        for d in free:
            if d in out or not budget.fits(d, *out):
                continue
            neighbours = {n.key: n for name, _c in d.consumes for n in sharing.get((d.driver, d.pool, name), ())}
            room = sum(
                budget.share(n)
                for key, n in neighbours.items()
                if key != d.key and n not in out and budget.fits(n, d, *out)
            )
            key = (-budget.fullness(d), -room, nvidia_gpus.gpu_order(d))
            if best_key is None or key < best_key:
                best, best_key = d, key
        if best is None:
            break
        out.append(best)
    return out
