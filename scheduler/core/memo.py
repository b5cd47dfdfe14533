"""Searches that found nothing, remembered until what they read changes: one memo, its invalidation a parameter.

A search over what-ifs of the snapshot (victims to preempt, moves that would make room) that finds nothing for a
job finds nothing again, for that job or any job of the same shape, while what the search read stays as it was;
the search is then answered from memory instead of being run again. What "stays as it was" means differs by
search, so a :class:`Memo` takes it as a parameter, ``holds(answer, now)``: given a remembered answer and the
present (whatever its keeper passes to :meth:`Memo.recall`), whether the answer still holds. An answer that no
longer holds is dropped when it is next asked for. Its keepers:

- preemption and reclaim (``scheduler.core.preemption.preemptor``): the answer is the cluster's :func:`generation` at
the
  search, and holds while the generation is the same (any placement, removal or node change moves it on);
- consolidation, per job (``scheduler.core.consolidation.moves``): the generation and the end of the earliest cooldown
(a pod may
  move again then);
- consolidation, per job shape (``scheduler.core.consolidation.no_plans``): the nodes the search read, unchanged in
what a plan
  could use, consolidation's own state, and the cooldowns.

Whoever keeps one also forgets on the changes its ``holds`` does not see (a queue's policy or guarantee).

A shape (:func:`pod_shape`) is what decides where a pod may go: everything of it but its name, uid, node, phase,
creation and start times (they order the queue and tell an age, they place nothing), annotations (what the
annotations ask for is parsed into the other fields) and its declared run time (see ``_IDENTITY``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Generic, TypeVar

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.arrays import ClusterArrays

#: What of a pod does not decide where it may go. Its declared run time decides nothing yet: kept out, pods that differ
#: only by it share what was found for their shape (with run times drawn per pod, a churn run's "no plan" memo
#: answered a sixth as often). Whatever comes to place by run time (backfill into held room) keys on it itself.
_IDENTITY = frozenset(
    {"name", "uid", "node_name", "phase", "deleting", "annotations", "gpu_ids", "created", "started", "run_time"}
)
_SHAPED = tuple(f.name for f in dataclasses.fields(PodRequest) if f.name not in _IDENTITY)

K = TypeVar("K", bound=Hashable)
A = TypeVar("A")
N = TypeVar("N")


def generation(arrays: ClusterArrays) -> int:
    """The cluster's generation: it grows whenever a node or a pod on it changes (the largest of the cache's
    per-node generation numbers, renewed on every placement, pod removal and node change, never reused)."""
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


class Memo(Generic[K, A, N]):
    """Answers by key, each kept while ``holds(answer, now)`` says it still holds; at most ``limit`` of them (the
    oldest goes first)."""

    def __init__(self, holds: Callable[[A, N], bool], *, limit: int) -> None:
        self._holds = holds
        self._limit = limit
        self._answers: dict[K, A] = {}
        #: Searches spared (an answer recalled) and answers dropped because what they read changed.
        self.recalled = 0
        self.dropped = 0

    def recall(self, key: K | None, now: N) -> A | None:
        """The answer kept for ``key`` if it still holds at ``now``; None otherwise (and then it is dropped)."""
        if key is None or (answer := self._answers.get(key)) is None:
            return None
        if not self._holds(answer, now):
            del self._answers[key]
            self.dropped += 1
            return None
        self.recalled += 1
        return answer

    def keep(self, key: K | None, answer: A) -> None:
        """Remember ``answer`` for ``key`` (a key of None is not kept: its search cannot be told apart)."""
        if key is None:
            return
        self._answers.pop(key, None)
        if len(self._answers) >= self._limit:
            self._answers.pop(next(iter(self._answers)))
        self._answers[key] = answer

    def last(self, key: K) -> A | None:
        """The answer kept for ``key``, whether it still holds or not (what was last said of it)."""
        return self._answers.get(key)

    def forget(self, key: K) -> None:
        """Search for ``key`` again (it found something, or what it may take changed)."""
        self._answers.pop(key, None)

    def clear(self) -> None:
        self._answers.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._answers

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._answers))

    def __len__(self) -> int:
        return len(self._answers)
