"""The minimum run time before running work may be disturbed: "may this running job be preempted, reclaimed or
moved now?".

A Queue sets how long its running work runs before work of its own queue may preempt it
(``spec.preemption.withinQueueMinRuntimeSeconds``), another queue may reclaim it
(``spec.preemption.reclaimMinRuntimeSeconds``) or consolidation may move it
(``spec.consolidation.moveMinRuntimeSeconds``), each inherited from the nearest ancestor that sets it
(``QueueTree.min_runtime_s``), as KAI-Scheduler's ``preemptMinRuntime``/``reclaimMinRuntime``. Holding room and
backfilling it must not turn into churn: a job that just started is not thrown out for the next one.

Asked where victims and movable pods are chosen (the reclaim and preempt actions, ``Moves.why_not``). A job's start
is the earliest ``status.startTime`` of its pods the API server showed (it survives a restart of the scheduler),
else when the scheduler saw it placed (``Job.started``, the same clock). An elastic gang's surplus members are lent
room and are never protected (KAI-Scheduler keeps only an elastic job's minimum); its core is. A job protected now
is tried again when the queue retries its waiting work (a cluster event, or the unschedulable pool's timeout).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.api.crds.queue import Disturbance
from scheduler.api.objects.pod import PodRequest
from scheduler.core.preemption.victims import Candidate
from scheduler.core.tenancy import Tenancy

#: The Queue field behind each disturbance, for messages.
FIELDS: dict[Disturbance, str] = {
    "preempt": "spec.preemption.withinQueueMinRuntimeSeconds",
    "reclaim": "spec.preemption.reclaimMinRuntimeSeconds",
    "move": "spec.consolidation.moveMinRuntimeSeconds",
}


def in_force(tenancy: Tenancy, disturbance: Disturbance) -> bool:
    """Whether some queue sets a minimum run time for ``disturbance`` (else every job may be disturbed: the
    callers skip asking per candidate)."""
    return tenancy.tree.sets_min_runtime(disturbance)


def start_of(pods: Sequence[PodRequest], placed: float | None) -> float | None:
    """When work of ``pods`` started: the earliest start the API server showed for them, else ``placed``."""
    known = [p.started for p in pods if p.started]
    return min(known) if known else placed


def protected_until(
    tenancy: Tenancy, queue: str, disturbance: Disturbance, pods: Sequence[PodRequest], placed: float | None
) -> float:
    """Until when work of leaf ``queue`` (``pods``, placed at ``placed``) may not be disturbed so; -inf if it may."""
    minimum = tenancy.tree.min_runtime_s(queue, disturbance)
    start = start_of(pods, placed)
    if minimum <= 0 or start is None:
        return float("-inf")
    return start + minimum


def may_disturb(tenancy: Tenancy, candidate: Candidate, disturbance: Disturbance) -> bool:
    """Whether running ``candidate`` has run its queue's minimum run time for ``disturbance`` (an elastic gang's
    surplus member always has: see the module notes)."""
    if candidate.surplus:
        return True
    return tenancy.clock() >= protected_until(tenancy, candidate.queue, disturbance, candidate.pods, candidate.started)


def old_enough(tenancy: Tenancy, candidates: list[Candidate], disturbance: Disturbance) -> tuple[list[Candidate], bool]:
    """The ``candidates`` that may be disturbed so now, and whether any was left out for its minimum run time."""
    if not in_force(tenancy, disturbance):
        return candidates, False
    kept = [c for c in candidates if may_disturb(tenancy, c, disturbance)]
    return kept, len(kept) < len(candidates)


def why_protected(tenancy: Tenancy, queue: str, disturbance: Disturbance, until: float) -> str:
    """Why work protected ``until`` may not be disturbed now, naming the Queue's field."""
    minimum = tenancy.tree.min_runtime_s(queue, disturbance)
    left = until - tenancy.clock()
    return f"it has not run its queue {queue!r}'s minimum of {minimum:g}s ({FIELDS[disturbance]}; {left:.0f}s left)"
