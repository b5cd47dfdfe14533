"""Remembered "no plan" answers of consolidation's search, by job shape, until the cluster changes in a way that
could make a plan possible.

A move plan that does not exist cannot appear by a pod arriving: with that pod on its node, any plan would also
work without it (moving it or not, its room was free before). So a "no plan" for a job shape (what its members
ask, their priority, gang and topology level, the nodes it may use) is kept until one of these happens:

- on a node the search read, a pod leaves or changes, or the node itself changes (capacity, cordon, labels): the
  node's generation changed and not every pod it had is still there, the same;
- a node is added;
- consolidation's own state moves (``Moves.epoch``: a plan starts, ends or is abandoned, a pod leaves, a
  PodDisruptionBudget changes): what may move and what is held differ;
- a cooldown ends (a pod may move again): the answer is kept only until the earliest of them.

A pending job of the same shape then gets the answer without a search. Answers with a plan are not kept (a plan is
carried out at once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache, PodEntry, Snapshot
from scheduler.core import memo as core_memo
from scheduler.core.cycle import Context
from scheduler.core.memo import Memo

#: Shapes remembered at most (the oldest answer goes first).
MAX_SHAPES = 256


@dataclass(slots=True)
class Answer:
    why: str
    verdict: str
    gen: npt.NDArray[np.int64]
    cap: npt.NDArray[np.float64]
    base_reason: npt.NDArray[np.int8]
    node_model: npt.NDArray[np.int64]
    #: Per node slot with a node, its pods (slots without are left out: no pods).
    pods: dict[int, Mapping[str, PodEntry]]
    #: Per node slot with a node, the node's object.
    nodes: dict[int, object]
    epoch: int
    until: float


#: What of a job's context a kept answer may depend on: the held nodes (part of the key) and the waiting demand.
_KEPT = ("reserved", "pending")


def kinds_of(members: Sequence[PodRequest]) -> list[Hashable | None]:
    """What of each member a search's answer depends on (:func:`shape`; None where a field cannot be a key)."""
    # Who the pod is does not matter to its fit (the owner and Services only weigh soft spreading).
    return [core_memo.pod_shape(dataclasses.replace(p, owner="", service_labels=())) for p in members]


def shape(
    members: Sequence[PodRequest],
    *,
    whole_gang: bool,
    priority: int,
    level: int | None,
    context: Context,
    kinds: Sequence[Hashable | None] | None = None,
) -> Hashable | None:
    """What a search's answer depends on of the job; None if its context holds more than held nodes and the
    pending demand (which FGD's score looks ahead at: it orders nodes, it rules none out): not kept.
    ``kinds``: :func:`kinds_of` ``members``, if known."""
    for told in dataclasses.fields(context):
        value = getattr(context, told.name)
        if told.name not in _KEPT and value is not None and not (isinstance(value, tuple) and not value):
            return None
    held = context.reserved
    if kinds is None:
        kinds = kinds_of(members)
    if any(kind is None for kind in kinds):
        return None
    return (
        tuple(sorted(kinds, key=repr)),
        whole_gang,
        priority,
        level,
        None if held is None else np.asarray(held).tobytes(),
    )


class Present(NamedTuple):
    """What an answer is held against when it is recalled."""

    snapshot: Snapshot
    cache: Cache
    epoch: int
    now: float


class Pods:
    """Copies of the nodes' pods for the answers, shared by the answers that read a node with the same pods (a
    search runs at every cycle a job waits; between two of them few nodes' pods change)."""

    def __init__(self) -> None:
        #: Node slot -> (``Cache.pods_version`` then, a copy of its pods).
        self._copies: dict[int, tuple[int, Mapping[str, PodEntry]]] = {}

    def of(self, cache: Cache) -> dict[int, Mapping[str, PodEntry]]:
        """The pods of every node now (copies, which the cache's later changes leave alone)."""
        copies, out = self._copies, {}
        for slot, node in cache.nodes.items():
            version = cache.pods_version(slot)
            kept = copies.get(slot)
            if kept is None or kept[0] != version:
                kept = copies[slot] = (version, dict(node.pods))
            out[slot] = kept[1]
        return out


def answer(snapshot: Snapshot, cache: Cache, pods: Pods, *, why: str, verdict: str, epoch: int, until: float) -> Answer:
    """A "no plan" found on ``snapshot``, to keep until ``until`` at the latest, with what it read (the nodes' pods
    copied through ``pods``)."""
    a = snapshot.arrays
    return Answer(
        why,
        verdict,
        a.gen.copy(),
        a.cap.copy(),
        a.base_reason.copy(),
        a.node_model.copy(),
        pods.of(cache),
        {slot: node.info for slot, node in cache.nodes.items()},
        epoch,
        until,
    )


def holds(answer: Answer, present: Present) -> bool:
    """Whether ``answer`` still holds: nothing it read changed in a way that could make a plan possible."""
    a, cache = present.snapshot.arrays, present.cache
    if present.epoch != answer.epoch or present.now >= answer.until or a.slots != answer.gen.shape[0]:
        return False
    if a.cap.shape != answer.cap.shape:
        return False
    for slot in np.flatnonzero(a.gen != answer.gen).tolist():
        if (
            not np.array_equal(a.cap[slot], answer.cap[slot])
            or a.base_reason[slot] != answer.base_reason[slot]
            or a.node_model[slot] != answer.node_model[slot]
            or _node(cache, slot) is not answer.nodes.get(slot)
        ):
            return False
        now_on = cache.pods_on(slot)
        if any(now_on.get(key) is not entry for key, entry in answer.pods.get(slot, {}).items()):
            return False
    return True


def memo() -> Memo[Hashable, Answer, Present]:
    """Consolidation's "no plan" answers by job shape."""
    return Memo(holds, limit=MAX_SHAPES)


def _node(cache: Cache, slot: int) -> object:
    """The node object of ``slot`` (a node update replaces it: labels, taints), None if none."""
    entry = cache.nodes.get(slot)
    return entry.info if entry is not None else None
