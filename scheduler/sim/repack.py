"""The offline re-pack of issue 27: what moving pods could buy in the FGD paper's protocol, knowing everything.

From a final state of the protocol (every pod arrived, the ones that fit nowhere failed), the shared-GPU pods (one
GPU, less than all of it) are taken off and packed again, largest first, each on the first GPU with room for it
(first-fit decreasing), within each node's CPU and memory and the GPU models the pod allows; the whole-GPU and
CPU-only pods stay where they are. Then the pods that failed are placed, in their order of arrival, where they fit
(a shared one on the fullest GPU with room, a whole-GPU one on the first node with enough whole GPUs free). The
allocation it reaches is the re-pack's; the pods it moved are the price of that allocation in moves.

Two scopes:

- ``ffd``: across the cluster: first-fit decreasing over the GPUs in the order they were opened, a new GPU (no pod
  on it) opened only when no open one has room, the first in the cluster's order; a pod for which the packing left
  no room (CPU and memory run out on the nodes with open GPUs) is lost: it counts as moved and no longer placed;
- ``node``: each node's shared pods packed again on that node's GPUs only (first-fit decreasing there): the CPU and
  memory in use do not change, so every pod finds its place again.

A pod is moved when its node or its GPU changes. GPUs of one node are alike, so each node's packed GPUs are given
the device numbers that keep the most of their pods where they were (greedily, the GPU with most pods of one old
device first): the count is what that packing costs, not less.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.cache.state import Cache
from scheduler.kernels import layout
from scheduler.sim.trace import PodSpec

ORDERS = ("ffd", "node")


@dataclass(frozen=True, slots=True)
class Repack:
    #: Allocated GPU share (%) before the re-pack (the final state's) and after it (and the failed pods placed).
    before: float
    after: float
    #: Pods the re-pack moved (node or GPU changed), shared pods packed, pods placed in the final state.
    moved: int
    #: Shared pods the packing found no room for (counted as moved, and no longer allocated).
    lost: int
    shared: int
    placed: int
    #: Failed pods placed after the re-pack, of how many failed; GPUs with no pod left after the re-pack, before
    #: the failed pods (and in the final state).
    newly_placed: int
    failed: int
    free_gpus: int
    free_gpus_before: int

    @property
    def moved_pct_of_placed(self) -> float:
        return 100.0 * self.moved / self.placed if self.placed else 0.0


def _is_shared(spec: PodSpec) -> bool:
    return spec.num_gpu == 1 and 0 < spec.gpu_milli < layout.WHOLE


def _cell(flat: int, width: int) -> tuple[int, int]:
    return flat // width, flat % width


def repack(
    cache: Cache, pods: Sequence[PodSpec], placed: np.ndarray, *, order: str = "ffd", cpu: bool = True
) -> Repack:
    """Re-pack the final state in ``cache`` of ``pods`` (pod ``i`` named ``<name>#i``; ``placed[i]`` whether it was
    placed) with ``order`` (:data:`ORDERS`); ``cache`` is read, not changed. ``cpu=False`` leaves the nodes' CPU
    and memory out (the GPUs alone, as docs/simulator.md's estimate of 37 GPUs read them): not a placement any
    cluster could make, only what the GPUs alone would allow."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {', '.join(ORDERS)}")
    a = cache.arrays
    slots = a.slots
    gpus_of = a.gpu_count[:slots].astype(int)
    width = int(gpus_of.max()) if slots else 0
    free_cpu = a.cap[:slots, layout.CPU] - a.used[:slots, layout.CPU]
    free_mem = a.cap[:slots, layout.MEMORY] - a.used[:slots, layout.MEMORY]
    model = [cache.models[int(m)] if int(m) >= 0 and int(m) < len(cache.models) else "" for m in a.node_model[:slots]]
    # GPU-milli in use on each device, and the shared pods where the final state has them.
    gpu_used = np.zeros((slots, max(width, 1)))
    where: dict[int, tuple[int, int]] = {}
    for entry in cache.pods():
        i = int(entry.pod.name.rsplit("#", 1)[1])
        spec, place = pods[i], entry.placement
        for device in place.gpu_ids:
            gpu_used[place.slot, device] += layout.WHOLE if not _is_shared(spec) else spec.gpu_milli
        if _is_shared(spec):
            where[i] = (place.slot, place.gpu_ids[0])
    allocated = float(a.used[:slots, layout.GPU_MILLI].sum())
    capacity = float(gpus_of.sum()) * layout.WHOLE
    valid = np.arange(max(width, 1))[None, :] < gpus_of[:, None]
    free_before = int(((gpu_used == 0) & valid).sum())

    models = np.array(model, dtype=object)

    def node_ok(spec: PodSpec) -> np.ndarray:
        ok = (free_cpu >= spec.cpu_milli) & (free_mem >= spec.memory_mib * 2**20) | (not cpu)
        return ok & np.isin(models, spec.gpu_spec) if spec.gpu_spec else ok

    # Take the shared pods off.
    for i, (slot, device) in where.items():
        spec = pods[i]
        gpu_used[slot, device] -= spec.gpu_milli
        free_cpu[slot] += spec.cpu_milli
        free_mem[slot] += spec.memory_mib * 2**20
    held = gpu_used > 0  # devices with a whole-GPU pod: never opened
    shared_on = np.zeros_like(gpu_used)
    #: The order devices were opened in (holding shared pods); never opened: infinity.
    opened_at = np.full(gpu_used.shape, np.inf)
    pods_on: dict[tuple[int, int], list[int]] = {}

    def room(spec: PodSpec) -> np.ndarray:
        """Devices with room for ``spec`` (GPU-milli, its node's CPU and memory, the model)."""
        fit: np.ndarray = (shared_on + spec.gpu_milli <= layout.WHOLE) & ~held & valid & node_ok(spec)[:, None]
        return fit

    def put(i: int, slot: int, device: int) -> None:
        spec = pods[i]
        if not np.isfinite(opened_at[slot, device]):
            opened_at[slot, device] = len(pods_on)
        shared_on[slot, device] += spec.gpu_milli
        free_cpu[slot] -= spec.cpu_milli
        free_mem[slot] -= spec.memory_mib * 2**20
        pods_on.setdefault((slot, device), []).append(i)

    def first_fit(spec: PodSpec) -> tuple[int, int] | None:
        """The first opened device with room; else the first device with nothing on it, in the cluster's order."""
        fit = room(spec)
        rank = np.where(fit, opened_at, np.inf)
        if np.isfinite(rank).any():
            return _cell(int(np.argmin(rank)), rank.shape[1])
        empty = fit & (shared_on == 0)
        return _cell(int(np.argmax(empty)), rank.shape[1]) if empty.any() else None

    lost: list[int] = []
    for i in sorted(where, key=lambda i: (-pods[i].gpu_milli, i)):
        spec = pods[i]
        own = where[i]
        if order == "node":
            fit = room(spec)
            mine = np.zeros_like(fit)
            mine[own[0]] = fit[own[0]]
            rank = np.where(mine, opened_at, np.inf)
            if np.isfinite(rank).any():
                put(i, *_cell(int(np.argmin(rank)), rank.shape[1]))
            elif (mine[own[0]] & (shared_on[own[0]] == 0)).any():
                put(i, own[0], int(np.argmax(mine[own[0]] & (shared_on[own[0]] == 0))))
            else:
                lost.append(i)  # first-fit decreasing needs more GPUs than the node's own packing had
                allocated -= spec.gpu_milli
            continue
        spot = first_fit(spec)
        if spot is None:
            lost.append(i)  # the packing left it no room: it counts as not placed
            allocated -= spec.gpu_milli
            continue
        put(i, *spot)
    # Device numbers: each node's packed GPUs take the old devices that keep most of their pods in place.
    moved = 0
    by_node: dict[int, list[tuple[int, int]]] = {}
    for slot, device in pods_on:
        by_node.setdefault(slot, []).append((slot, device))
    for slot, devices in by_node.items():
        overlap = []
        for key in devices:
            for old in range(gpus_of[slot]):
                count = sum(1 for i in pods_on[key] if where[i] == (slot, old))
                if count:
                    overlap.append((count, key, old))
        overlap.sort(key=lambda t: (-t[0], t[1], t[2]))
        given: dict[tuple[int, int], int] = {}
        taken: set[int] = set()
        for _, key, old in overlap:
            if key not in given and old not in taken and not held[slot, old]:
                given[key] = old
                taken.add(old)
        for key in devices:
            kept = given.get(key)
            moved += sum(1 for i in pods_on[key] if kept is None or where[i] != (slot, kept))
    free_gpus = int(((shared_on == 0) & ~held & valid).sum())
    # The failed pods, in their order of arrival.
    newly = 0
    failed = [i for i in range(len(pods)) if not placed[i]]
    for i in failed:
        spec = pods[i]
        ok = node_ok(spec)
        if _is_shared(spec):
            fit = room(spec)
            if not fit.any():
                continue
            # The fullest device with room (a device with nothing on it last).
            fullest = np.where(fit, shared_on, -1.0)
            put(i, *_cell(int(np.argmax(fullest)), fullest.shape[1]))
        elif spec.num_gpu:
            free = (shared_on == 0) & ~held & valid
            nodes = np.flatnonzero(ok & (free.sum(axis=1) >= spec.num_gpu))
            if not nodes.size:
                continue
            slot = int(nodes[0])
            for device in np.flatnonzero(free[slot])[: spec.num_gpu].tolist():
                held[slot, device] = True
            free_cpu[slot] -= spec.cpu_milli
            free_mem[slot] -= spec.memory_mib * 2**20
        else:
            nodes = np.flatnonzero(ok)
            if not nodes.size:
                continue
            free_cpu[int(nodes[0])] -= spec.cpu_milli
            free_mem[int(nodes[0])] -= spec.memory_mib * 2**20
        newly += 1
        allocated += spec.gpu_total
    return Repack(
        before=100.0 * float(a.used[:slots, layout.GPU_MILLI].sum()) / capacity,
        after=100.0 * allocated / capacity,
        moved=moved + len(lost),
        lost=len(lost),
        shared=len(where),
        placed=int(placed.sum()),
        newly_placed=newly,
        failed=len(failed),
        free_gpus=free_gpus,
        free_gpus_before=free_before,
    )


@dataclass(frozen=True, slots=True)
class Repair:
    """The move-frugal re-pack (:func:`repair`): the allocation (%) after each failed pod it placed, against the
    pods moved so far."""

    before: float
    #: (pods moved so far, allocation %) after each failed pod placed, in the order they were placed.
    steps: list[tuple[int, float]]
    placed: int
    failed: int

    def at(self, moves: int) -> float:
        """The allocation reached with at most ``moves`` pods moved."""
        return max((alloc for m, alloc in self.steps if m <= moves), default=self.before)


def repair(cache: Cache, pods: Sequence[PodSpec], placed: np.ndarray) -> Repair:
    """From the final state in ``cache`` (as for :func:`repack`), knowing every failed pod: the failed pods asking
    one GPU or less, largest first, each placed where a free place is, else by moving one shared pod off a GPU (the
    smallest pod that makes room, to the fullest GPU with room for it, on its node or another) so that it fits
    there; a pod that neither places is skipped. Each step is one more failed pod placed for zero or one move, so
    the steps are the allocation this buys against the moves it costs."""
    a = cache.arrays
    slots = a.slots
    gpus_of = a.gpu_count[:slots].astype(int)
    width = max(int(gpus_of.max()) if slots else 0, 1)
    valid = np.arange(width)[None, :] < gpus_of[:, None]
    free_cpu = a.cap[:slots, layout.CPU] - a.used[:slots, layout.CPU]
    free_mem = a.cap[:slots, layout.MEMORY] - a.used[:slots, layout.MEMORY]
    models = np.array(
        [cache.models[int(m)] if 0 <= int(m) < len(cache.models) else "" for m in a.node_model[:slots]], dtype=object
    )
    used = np.zeros((slots, width))
    held = np.zeros((slots, width), dtype=bool)  # a whole-GPU pod's devices
    # The shared pods: where they are and what they ask (arrays, one row a pod).
    rows: list[tuple[int, int, int, float, float, int]] = []
    for entry in cache.pods():
        i = int(entry.pod.name.rsplit("#", 1)[1])
        spec, place = pods[i], entry.placement
        for device in place.gpu_ids:
            if _is_shared(spec):
                used[place.slot, device] += spec.gpu_milli
                rows.append((place.slot, device, spec.gpu_milli, spec.cpu_milli, spec.memory_mib * 2**20, i))
            else:
                used[place.slot, device] = layout.WHOLE
                held[place.slot, device] = True
    table = np.array(rows, dtype=float).reshape(-1, 6)
    capacity = float(gpus_of.sum()) * layout.WHOLE
    allocated = float(a.used[:slots, layout.GPU_MILLI].sum())
    before = 100.0 * allocated / capacity

    def node_ok(spec: PodSpec, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        ok = (cpu >= spec.cpu_milli) & (mem >= spec.memory_mib * 2**20)
        return ok & np.isin(models, spec.gpu_spec) if spec.gpu_spec else ok

    def fits(spec: PodSpec, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """Devices with room for ``spec`` given the nodes' free ``cpu`` and ``mem``."""
        room: np.ndarray = (used + spec.gpu_milli <= layout.WHOLE) & ~held & valid & node_ok(spec, cpu, mem)[:, None]
        return room

    def fullest(room: np.ndarray) -> tuple[int, int]:
        return _cell(int(np.argmax(np.where(room, used, -1.0))), width)

    moves = 0
    steps: list[tuple[int, float]] = []
    failed = [i for i in range(len(pods)) if not placed[i] and pods[i].num_gpu == 1]
    for i in sorted(failed, key=lambda i: (-pods[i].gpu_total, i)):
        spec = pods[i]
        milli = float(spec.gpu_total)
        room = fits(spec, free_cpu, free_mem)
        if room.any():
            slot, device = fullest(room)
        else:
            # One shared pod moved off a device makes room there: the smallest such pod with a place elsewhere.
            gap = layout.WHOLE - used[table[:, 0].astype(int), table[:, 1].astype(int)]
            cand = np.flatnonzero(gap + table[:, 2] >= milli)
            found = None
            for r in sorted(cand.tolist(), key=lambda r: (table[r, 2], r)):
                slot, device, p_milli, p_cpu, p_mem, p = (
                    int(table[r, 0]),
                    int(table[r, 1]),
                    *table[r, 2:5],
                    int(table[r, 5]),
                )
                if not node_ok(
                    spec,
                    free_cpu + np.where(np.arange(slots) == slot, p_cpu, 0),
                    free_mem + np.where(np.arange(slots) == slot, p_mem, 0),
                )[slot]:
                    continue
                if not spec.gpu_milli < layout.WHOLE and used[slot, device] != p_milli:
                    continue  # a whole-GPU pod needs the device empty: its only pod moved
                # Where the moved pod goes: another device, with its node's CPU and memory (its own node's counting
                # the failed pod in and the moved pod as staying).
                cpu, mem = free_cpu.copy(), free_mem.copy()
                cpu[slot] += p_cpu - spec.cpu_milli
                mem[slot] += p_mem - spec.memory_mib * 2**20
                used[slot, device] -= p_milli
                target = fits(pods[p], cpu, mem)
                used[slot, device] += p_milli
                target[slot, device] = False
                if target.any():
                    found = (r, slot, device, fullest(target))
                    break
            if found is None:
                continue
            r, slot, device, (to_slot, to_device) = found
            p = int(table[r, 5])
            used[slot, device] -= table[r, 2]
            free_cpu[slot] += table[r, 3]
            free_mem[slot] += table[r, 4]
            used[to_slot, to_device] += table[r, 2]
            free_cpu[to_slot] -= table[r, 3]
            free_mem[to_slot] -= table[r, 4]
            table[r, 0], table[r, 1] = to_slot, to_device
            moves += 1
        if spec.gpu_milli < layout.WHOLE:
            used[slot, device] += spec.gpu_milli
            table = np.vstack([table, [slot, device, spec.gpu_milli, spec.cpu_milli, spec.memory_mib * 2**20, i]])
        else:
            used[slot, device] = layout.WHOLE
            held[slot, device] = True
        free_cpu[slot] -= spec.cpu_milli
        free_mem[slot] -= spec.memory_mib * 2**20
        allocated += milli
        steps.append((moves, 100.0 * allocated / capacity))
    return Repair(before, steps, int(placed.sum()), len(failed))
