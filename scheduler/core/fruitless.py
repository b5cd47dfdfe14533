"""Searches that found nothing, remembered until the cluster changes: "no answer for this shape at this generation".

A search over what-ifs of the snapshot (victims to preempt, moves that would make room) that finds nothing for a
job finds nothing again, for that job or any job of the same shape, while the cluster stays as it was; the
search is then answered from memory instead of being run again. The cluster's generation
(:func:`generation`: the largest of the cache's per-node generation numbers, renewed on every placement, pod
removal and node change, never reused) says when it changed: what :class:`Fruitless` holds is only good at the
generation it was found at, and is dropped when the generation moves on. Whoever keeps one also clears it on the
changes the generation does not see (a queue's policy or guarantee).

A shape (:func:`pod_shape`) is what decides where a pod may go: everything of it but its name, uid, node, phase,
creation and start times (they order the queue and tell an age, they place nothing) and annotations (what the
annotations ask for is parsed into the other fields), and its declared run time (see ``_IDENTITY``). Consolidation's
memo (``core/move_memo``) keys its job shapes on it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping

from scheduler.api.pod import PodRequest
from scheduler.cache.arrays import ClusterArrays

#: What of a pod does not decide where it may go. Its declared run time decides nothing yet: kept out, pods that differ
#: only by it share what was found for their shape (with run times drawn per pod, a churn run's "no plan" memo
#: answered a sixth as often). Whatever comes to place by run time (backfill into held room) keys on it itself.
_IDENTITY = frozenset(
    {"name", "uid", "node_name", "phase", "deleting", "annotations", "gpu_ids", "created", "started", "run_time"}
)
_SHAPED = tuple(f.name for f in dataclasses.fields(PodRequest) if f.name not in _IDENTITY)


def generation(arrays: ClusterArrays) -> int:
    """The cluster's generation: it grows whenever a node or a pod on it changes."""
    return int(arrays.gen.max()) if arrays.slots else 0


def _frozen(value: object) -> object:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | set | frozenset):
        return tuple(_frozen(v) for v in value)
    return value


def pod_shape(pod: PodRequest) -> Hashable | None:
    """What decides where ``pod`` may go, as a hashable key (None if a field cannot be one): two replicas of a
    Deployment have the same shape."""
    shape = tuple(_frozen(getattr(pod, name)) for name in _SHAPED)
    try:
        hash(shape)
    except TypeError:
        return None
    return shape


class Fruitless:
    """The searches that found nothing at the cluster's current generation, by what was searched for."""

    def __init__(self) -> None:
        self._generation = -1
        self._keys: set[Hashable] = set()

    def known(self, key: Hashable, generation: int) -> bool:
        """Whether a search for ``key`` found nothing at ``generation``."""
        return generation == self._generation and key in self._keys

    def record(self, key: Hashable, generation: int) -> None:
        """A search for ``key`` at ``generation`` finds nothing (what older generations found is dropped)."""
        if generation != self._generation:
            self._keys.clear()
            self._generation = generation
        self._keys.add(key)

    def forget(self, key: Hashable) -> None:
        """Search for ``key`` again (it found something, or what it may take changed)."""
        self._keys.discard(key)

    def clear(self) -> None:
        self._keys.clear()

    def __len__(self) -> int:
        return len(self._keys)
