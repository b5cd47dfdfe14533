"""The cluster as arrays, with an undo log for what-ifs.

:class:`ClusterArrays` is what kernels read: per node slot, capacity and usage per resource column (see
``scheduler.kernels.layout``), and per GPU device, free milli and free memory. Every change to a slot gives
it a fresh generation number from a counter shared by the cache and its snapshots, so a consumer that caches
per-node results (the FGD statistics, the snapshot itself) refreshes only the rows whose number changed.

A what-if (placing a gang, evicting victims) opens a checkpoint, changes rows, and then rolls back or keeps
them. The undo log saves only the rows touched, never the whole cluster.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.pod import PodRequest
from scheduler.kernels import layout

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
_T = TypeVar("_T")

#: The per-slot arrays a snapshot copies from the cache (every array of :class:`ClusterArrays`).
_ROWS = ("cap", "used", "gpu_free", "gpu_mem_free", "gpu_count", "gpu_mem_each", "node_model", "base_reason", "gen")


@dataclass(frozen=True, slots=True)
class Placement:
    """What one pod takes on one node: a request vector and, per device, milli and memory."""

    slot: int
    request: F64
    gpu_ids: tuple[int, ...] = ()
    gpu_milli: float = 0.0
    #: Device memory taken on each device, in bytes (a whole GPU takes all of it).
    gpu_memory: tuple[float, ...] = ()
    #: The pod, so that a what-if placing or removing it shows it to the filters that look at other pods
    #: (host ports); not compared, not used by the arrays.
    pod: PodRequest | None = field(default=None, compare=False)


class ClusterArrays:
    """Node slots x resource columns, node slots x GPU devices, and the generation of every slot."""

    def __init__(self, counter: itertools.count[int], nodes: int = 64, resources: int = layout.FIXED, gpus: int = 8):
        self._counter = counter
        self.cap = np.zeros((nodes, resources))
        self.used = np.zeros((nodes, resources))
        self.gpu_free = np.zeros((nodes, gpus))
        self.gpu_mem_free = np.zeros((nodes, gpus))
        self.gpu_count = np.zeros(nodes, dtype=np.int64)
        self.gpu_mem_each = np.zeros(nodes)
        self.node_model = np.full(nodes, -1, dtype=np.int64)
        #: Why a slot cannot take pods whatever they ask (``layout.ABSENT`` for empty slots, cordoned nodes).
        self.base_reason = np.full(nodes, layout.ABSENT, dtype=np.int8)
        self.gen = np.zeros(nodes, dtype=np.int64)
        self._undo: list[tuple[int, F64, F64, F64, int]] = []
        self._open = 0

    # --- shape -------------------------------------------------------------------------------------------------

    @property
    def slots(self) -> int:
        return int(self.cap.shape[0])

    def grow(self, *, nodes: int | None = None, resources: int | None = None, gpus: int | None = None) -> None:
        """Make room for at least this many node slots, resource columns and devices per node."""
        n, r = self.cap.shape
        g = self.gpu_free.shape[1]
        new_n = max(n, nodes or 0)
        if new_n > n:
            new_n = max(new_n, 2 * n)
        new_r, new_g = max(r, resources or 0), max(g, gpus or 0)
        if (new_n, new_r, new_g) == (n, r, g):
            return

        def resized(a: npt.NDArray[np.generic], shape: tuple[int, ...], fill: float | int) -> npt.NDArray[np.generic]:
            out = np.full(shape, fill, dtype=a.dtype)
            out[tuple(slice(0, s) for s in a.shape)] = a
            return out

        self.cap = resized(self.cap, (new_n, new_r), 0.0)  # type: ignore[assignment]
        self.used = resized(self.used, (new_n, new_r), 0.0)  # type: ignore[assignment]
        self.gpu_free = resized(self.gpu_free, (new_n, new_g), 0.0)  # type: ignore[assignment]
        self.gpu_mem_free = resized(self.gpu_mem_free, (new_n, new_g), 0.0)  # type: ignore[assignment]
        self.gpu_count = resized(self.gpu_count, (new_n,), 0)  # type: ignore[assignment]
        self.gpu_mem_each = resized(self.gpu_mem_each, (new_n,), 0.0)  # type: ignore[assignment]
        self.node_model = resized(self.node_model, (new_n,), -1)  # type: ignore[assignment]
        self.base_reason = resized(self.base_reason, (new_n,), layout.ABSENT)  # type: ignore[assignment]
        self.gen = resized(self.gen, (new_n,), 0)  # type: ignore[assignment]
        for slot in range(n, new_n):
            self.gen[slot] = next(self._counter)

    def touch(self, slot: int) -> None:
        """Record that ``slot`` changed (and save it for rollback if a checkpoint is open)."""
        if self._open:
            self._undo.append(
                (
                    slot,
                    self.used[slot].copy(),
                    self.gpu_free[slot].copy(),
                    self.gpu_mem_free[slot].copy(),
                    int(self.gen[slot]),
                )
            )
        self.gen[slot] = next(self._counter)

    # --- usage -------------------------------------------------------------------------------------------------

    def apply(self, p: Placement, sign: float = 1.0) -> None:
        """Add (``sign`` = 1) or remove (-1) what a pod takes on its node."""
        self.touch(p.slot)
        self.used[p.slot, : p.request.shape[0]] += sign * p.request
        for i, g in enumerate(p.gpu_ids):
            self.gpu_free[p.slot, g] -= sign * p.gpu_milli
            self.gpu_mem_free[p.slot, g] -= sign * p.gpu_memory[i]

    # --- what-ifs ----------------------------------------------------------------------------------------------

    def checkpoint(self) -> int:
        """Open a what-if; changes from here on can be undone with :meth:`rollback`. Nests."""
        self._open += 1
        return len(self._undo)

    def rollback(self, token: int) -> None:
        """Undo every change since the checkpoint ``token`` and close it."""
        while len(self._undo) > token:
            slot, used, gpu_free, gpu_mem_free, gen = self._undo.pop()
            # A row saved before the arrays grew (a pod asked for a resource never seen) is shorter: the columns
            # added since were empty then.
            for array, saved in ((self.used, used), (self.gpu_free, gpu_free), (self.gpu_mem_free, gpu_mem_free)):
                array[slot] = 0.0
                array[slot, : saved.shape[0]] = saved
            # Safe to restore: generation numbers are never reused, so a consumer that saw the what-if state
            # holds a number that no longer matches and refreshes.
            self.gen[slot] = gen
        self._close()

    @property
    def in_what_if(self) -> bool:
        """Whether a checkpoint is open (what changes now may be rolled back)."""
        return self._open > 0

    def keep(self, token: int) -> None:
        """Keep the changes since ``token`` and close the checkpoint (an outer one can still undo them)."""
        if self._open == 1:
            del self._undo[token:]
        self._close()

    def _close(self) -> None:
        if self._open == 0:
            raise RuntimeError("no checkpoint is open")
        self._open -= 1

    # --- queries -----------------------------------------------------------------------------------------------

    def free_devices(self, slot: int, count: int, milli: float, memory: float = 0.0) -> list[int]:
        """The lowest-index devices with at least ``milli`` and ``memory`` free (up to ``count``)."""
        found = []
        for g in range(int(self.gpu_count[slot])):
            if self.gpu_free[slot, g] >= milli and (memory <= 0.0 or self.gpu_mem_free[slot, g] >= memory):
                found.append(g)
                if len(found) == count:
                    break
        return found

    def device_memory(self, slot: int, gpu_ids: Sequence[int], whole: bool, memory: float) -> tuple[float, ...]:
        return tuple(float(self.gpu_mem_each[slot]) if whole else memory for _ in gpu_ids)

    def copy_rows(self, other: ClusterArrays, rows: I64) -> None:
        """Make ``rows`` of this view equal to ``other``'s (same shape)."""
        # One row (a cycle's snapshot after one placement) by a plain index: a quarter of a fancy index's cost.
        at: int | I64 = int(rows[0]) if rows.shape[0] == 1 else rows
        for name in _ROWS:
            getattr(self, name)[at] = getattr(other, name)[at]

    def same_shape(self, other: ClusterArrays) -> bool:
        return self.cap.shape == other.cap.shape and self.gpu_free.shape == other.gpu_free.shape

    def clone(self) -> ClusterArrays:
        twin = ClusterArrays(self._counter, *self.cap.shape, self.gpu_free.shape[1])
        twin.copy_rows(self, np.arange(self.slots))
        return twin


def distinct_index(slots: int, by_slot: Mapping[int, _T], *, key: Callable[[_T], Hashable]) -> tuple[I64, list[_T]]:
    """Per slot an index into the distinct values of ``by_slot`` (-1 where it has none), and those values, in a
    read-only array: a question about every node is then asked once per distinct value."""
    distinct: dict[Hashable, int] = {}
    values: list[_T] = []
    ids = np.full(slots, -1, dtype=np.int64)
    for slot, value in by_slot.items():
        at = distinct.setdefault(key(value), len(values))
        if at == len(values):
            values.append(value)
        ids[slot] = at
    ids.setflags(write=False)
    return ids, values
