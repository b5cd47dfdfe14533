"""The backfill action: the head of a queue's line holds the nodes that free soonest, and other work uses that room
only if it is gone before the head's expected start (EASY backfill, as Slurm's: a job starts early only if it
"does not delay the expected initiation time of any higher priority job").

Without it, a job of 8 GPUs waits behind every smaller job that arrives after it: each GPU that frees is taken by
the next small pod, and a whole node seldom drains by chance. A hold alone (the reservation against starvation,
``Holds.reserve``) idles the GPUs of its nodes while they drain; run times make that idle room usable: a pod whose
declared run time (``scheduler.api.objects.run_time``: ``activeDeadlineSeconds``, Kueue's max-exec-time label, the
``gpusched.io/expected-runtime`` estimate) ends by the expected start may take it, and one that declares none
never does.

The action runs for a job the other actions made no room for: a job of two or more whole GPUs (any GPU that frees
fits a job of one, in the fair order) that has waited ``holdAfterSeconds`` (the profile's ``backfill:``, or its
Queue's ``spec.backfill.holdAfterSeconds``) and whose queue holds room for fewer than ``heldJobsPerQueue`` jobs
(1: the head of its line). Since the session takes jobs in the queue's order, the first such job of a queue is the
head of its line. The nodes it holds are those where its members' GPUs free soonest, each GPU freeing when the last
pod on it ends: a pod's end is its start plus its declared run time, and a pod without one never ends as far as
the estimate knows. Which nodes it may use at all is its own cycle's filter results (a node its rules keep it off,
or held for another job, is not a candidate), with the room each node has empty. The hold (``Kind.HEAD`` in
``scheduler.core.holds``) keeps the nodes until the job is placed or gone; its expected start is reckoned again
from the pods still running there once it has come while the job still waits (a soft estimate overrun), or while
it is unknown. The job is told (an Event, ``gpusched explain``): how many GPUs on which nodes are held for it, and
when it is expected to start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache, PodEntry, Snapshot
from scheduler.core import capacity, registry
from scheduler.core.actions import NOTHING, Action, Asked, Outcome, Setting, Verdict
from scheduler.core.holds import KEPT, Hold, Kind, sized, union
from scheduler.core.jobs import Attempt
from scheduler.core.statement import Statement
from scheduler.framework import reasons as framework_reasons
from scheduler.kernels import layout

#: How many held nodes a message names before it says how many more.
NAMED_NODES = 3


class Backfill(Action):
    name = "backfill"

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.config = setting.scheduler.framework.config.backfill
        setting.holds.when_overrun(Kind.HEAD, self._reckon)

    def run(self, attempt: Attempt, snapshot: Snapshot, statement: Statement) -> Outcome:
        setting = self.setting
        need = whole_gpus(attempt.members)
        if need is None or sum(need) < 2:
            return NOTHING
        now = setting.clock()
        own = setting.holds.get(Kind.HEAD, attempt.key)
        if own is not None:  # its nodes drain for it; their expected start is reckoned again when it is overrun
            return Outcome(
                Verdict.WAITS,
                said=_said(holding(setting.scheduler.cache, own.slots, own.expected_start, now, gpus=sum(need))),
            )
        first = attempt.item.first_attempt
        after = setting.tenancy.tree.hold_after_s(attempt.queue)
        if first is None or now - first < (self.config.hold_after_s if after is None else after):
            return NOTHING
        held = sum(1 for hold in setting.holds.of_kind(Kind.HEAD) if hold.queue == attempt.queue)
        if held >= self.config.held_jobs_per_queue:
            return NOTHING
        candidates = self._candidates(attempt, snapshot)
        found = soonest(setting.scheduler.cache, candidates, need, end_of=self._end_of, now=now)
        if found is None:
            return NOTHING
        start, slots = found
        mask = np.zeros(snapshot.arrays.slots, dtype=bool)
        mask[slots] = True
        key, priority, queue, obj = attempt.key, attempt.priority, attempt.queue, attempt.obj

        def hold() -> None:
            setting.holds.hold(
                kind=Kind.HEAD, job=key, slots=mask, priority=priority, queue=queue, expected_start=start
            )

        statement.hold(hold)
        message = holding(setting.scheduler.cache, mask, start, now, gpus=sum(need))
        statement.tell(lambda: setting.events.emit(obj=obj, kind="Normal", reason="HoldingRoom", message=message))
        return Outcome(Verdict.WAITS, said=_said(message))

    def explain(self, asked: Asked) -> list[str]:
        """The room held for the job, if any, and the room held for others it may or may not use."""
        holds, now = self.setting.holds, self.setting.clock()
        cache = self.setting.scheduler.cache
        lines = []
        own = holds.get(Kind.HEAD, asked.key)
        if own is not None:
            gpus = sum(whole_gpus(asked.members) or [0])
            lines.append(f"  backfill: {holding(cache, own.slots, own.expected_start, now, gpus=gpus)}")
        reserved = asked.context.reserved
        for hold in holds.of_kind(Kind.HEAD):
            if hold.job == asked.key:
                continue
            kept = reserved is not None and bool((sized(reserved, hold.slots.shape[0]) & hold.slots).any())
            if not all(p.run_time is not None for p in asked.members):
                may = "may not use it: it declares no run time"
            else:
                may = "may not use it: its run time ends later" if kept else "may use it: its run time ends by then"
            lines.append(
                f"  backfill: {node_names(cache, hold.slots)} held for {hold.job}, expected to start"
                f" {_in(hold.expected_start, now)}; this job {may}"
            )
        return lines

    def _candidates(self, attempt: Attempt, snapshot: Snapshot) -> np.ndarray:
        """The node slots the job could use once room frees there: its own cycle's filters refused them for room
        only (not a rule of theirs, not held for another job), and they hold its largest member when empty."""
        pod = max(attempt.members, key=lambda p: p.gpu.count)
        filtered = self.setting.scheduler.filter(pod, snapshot, attempt.context)
        reasons = filtered.reasons
        if reasons is None:
            return np.zeros(0, dtype=np.int64)
        out = [rule.code for rule in registry.REASONS.never] + [framework_reasons.RESERVED.code, layout.ABSENT]
        usable = ~np.isin(reasons, out) & capacity.room_when_empty(snapshot, pod, filtered.state.request)
        # Held for others: its cycles keep off them (a full one is refused for room first), and so do their holders.
        others = [h.slots for kind in KEPT for h in self.setting.holds.of_kind(kind) if h.job != attempt.key]
        if attempt.context.reserved is not None:
            others.append(attempt.context.reserved)
        held = union(others)
        if held is not None:
            usable &= ~sized(held, usable.shape[0])
        return np.flatnonzero(usable)

    def _end_of(self, entry: PodEntry) -> float:
        """When running pod ``entry`` is expected to end (inf: it declares no run time)."""
        pod, job = entry.pod, self.setting.jobs.of_pod(entry.pod.key)
        # Not ``pod.expected_end``: a job placed at time 0 (a simulation's first instant) started then.
        start = pod.started or (job.started if job is not None else None)
        return math.inf if pod.run_time is None or start is None else start + pod.run_time.seconds

    def _reckon(self, hold: Hold) -> float:
        """``hold``'s expected start again, from the pods still running on its nodes (its job's members as they
        are now); an overrun pod is expected to end any moment."""
        job = self.setting.jobs.get(hold.job)
        members = 1 if job is None or job.group is None else max(job.missing, 1)
        need = whole_gpus(list(job.pending.values())[:members]) if job is not None else None
        if not need:
            return math.inf if hold.expected_start is None else hold.expected_start
        now = self.setting.clock()
        found = soonest(self.setting.scheduler.cache, np.flatnonzero(hold.slots), need, end_of=self._end_of, now=now)
        return math.inf if found is None else found[0]


def whole_gpus(members: Sequence[PodRequest]) -> list[int] | None:
    """The whole GPUs each member asks for; None when one asks for part of a GPU or for none."""
    need = [p.gpu.count for p in members]
    if not need or any(not p.gpu.whole or p.gpu.count < 1 for p in members):
        return None
    return need


def freeing(cache: Cache, slot: int, *, end_of: Callable[[PodEntry], float], now: float) -> np.ndarray:
    """When each GPU of node ``slot`` is free, soonest first: now for a free one, else when the last pod on it
    ends (``end_of``; an end already past counts as now: it is overrun and may end any moment)."""
    count = int(cache.arrays.gpu_count[slot])
    times = np.full(count, now)
    for entry in cache.pods_on(slot).values():
        end = max(end_of(entry), now) if entry.placement.gpu_ids else now
        for device in entry.placement.gpu_ids:
            if device < count:
                times[device] = max(times[device], end)
    return np.sort(times)


def soonest(
    cache: Cache,
    candidates: np.ndarray,
    need: Sequence[int],
    *,
    end_of: Callable[[PodEntry], float],
    now: float,
) -> tuple[float, list[int]] | None:
    """When the members asking ``need`` whole GPUs each could start on ``candidates`` (node slots), and on which of
    them: every member is counted at the largest ask, and each node holds as many as its GPUs free in time. None
    when the candidates cannot hold them all even empty."""
    each, members = max(need), len(need)
    ready: list[tuple[float, int]] = []
    for slot in candidates.tolist():
        times = freeing(cache, slot, end_of=end_of, now=now)
        ready.extend((float(times[k * each - 1]), slot) for k in range(1, times.shape[0] // each + 1))
    if len(ready) < members:
        return None
    ready.sort()
    taken = ready[:members]
    return taken[-1][0], sorted({slot for _, slot in taken})


def node_names(cache: Cache, mask: np.ndarray) -> str:
    """The nodes of ``mask`` by name (the first :data:`NAMED_NODES`, then how many more)."""
    slots = [s for s in np.flatnonzero(mask).tolist() if s in cache.nodes]
    names = [cache.nodes[s].info.name for s in slots[:NAMED_NODES]]
    more = f" and {len(slots) - NAMED_NODES} more" if len(slots) > NAMED_NODES else ""
    return f"node{'s' if len(slots) > 1 else ''} {', '.join(names)}{more}"


def holding(cache: Cache, mask: np.ndarray, start: float | None, now: float, *, gpus: int) -> str:
    """What the job holding ``mask`` is told."""
    return f"holding {gpus} GPUs on {node_names(cache, mask)} for this job; expected start {_in(start, now)}"


def _said(told: str) -> str:
    """What the job's FailedScheduling message and PodScheduled (or gang Scheduled) condition end with."""
    return told[:1].upper() + told[1:]


def _in(start: float | None, now: float) -> str:
    if start is None or not math.isfinite(start):
        return "unknown (a pod there declares no run time)"
    return f"in {max(0.0, start - now):.0f}s"
