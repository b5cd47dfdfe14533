"""The queue gate: whether a queue may start a job now (its limits, and the fair-share gate against starvation).

A job runs only if its queue and every ancestor stay within their limits and borrowing ceilings. On top of that,
a queue that already holds its fair share may not take freed capacity while another queue below its own has a job
waiting for room (``Tenancy.fair_share_gate``): ordering alone lets the small jobs of queues behind take every
freed GPU from a queue whose jobs are large. The gate stays work-conserving: with nobody starving, anyone may take
more.

Work for a queue that does not exist (or is not a leaf, or exists but is not accepted: its parent is missing, it
cannot be read) waits here, with an Event the first time (``QueueNotFound``, or ``QueueNotAccepted`` with the
queue's own reason), and is let in as soon as the queue can take it (:meth:`Gate.admitted`).

State kept here and nowhere else: the jobs that failed for lack of room (the *starving* demand, per leaf, with its
per-leaf sum kept as jobs come and go), the jobs the gate held back (for the queueing hint that wakes them), and
the work waiting for its queue.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.core.jobs import Job
from scheduler.core.ports import Events
from scheduler.core.tenancy import Tenancy, Vector, add_into
from scheduler.framework.interface import ClusterEvent
from scheduler.queue.scheduling import QueueItem

QUEUE_LIMIT = "QueueLimit"
FAIR_SHARE = "FairShare"
#: Why work waits for its queue: there is none of that name (or it is not a leaf), or it is there but not accepted.
QUEUE_NOT_FOUND = "QueueNotFound"
QUEUE_NOT_ACCEPTED = "QueueNotAccepted"
QUEUE_WAITS = frozenset({QUEUE_NOT_FOUND, QUEUE_NOT_ACCEPTED})
#: The queueing hint for a job the gate held back: what it holds changes as pods leave; the limits and fair shares
#: with the Queues; fair shares with the cluster's capacity; the gate with the starving jobs placed.
WAKES = frozenset(
    {
        ClusterEvent.POD_DELETED,
        ClusterEvent.QUEUE_CHANGED,
        ClusterEvent.NODE_ADDED,
        ClusterEvent.NODE_UPDATED,
        ClusterEvent.STARVING_JOB_FED,
    }
)


class Gate:
    def __init__(self, tenancy: Tenancy, *, fair_share: bool = True) -> None:
        self.tenancy = tenancy
        #: Whether a queue at its fair share must leave freed capacity to queues below theirs.
        self.fair_share = fair_share
        #: Leaf queue -> job key -> what the job asks for, for the jobs that failed for lack of room.
        self.starving: dict[str, dict[str, Vector]] = {}
        #: Per leaf, the sum of ``starving``.
        self.starving_totals: dict[str, Vector] = {}
        #: Jobs the fair-share gate held back, with what they ask for.
        self.gated: dict[str, Vector] = {}
        #: Jobs whose queue does not exist (yet) or is not accepted: leaf -> job key -> the job.
        self.waiting: dict[str, dict[str, Job]] = {}
        #: Per waiting job, how many members it had when it was last told (a gang's members that come later are
        #: told too).
        self._told: dict[str, int] = {}

    def queue_problem(self, leaf: str) -> tuple[str, str]:
        """(reason, message) why ``leaf`` cannot take work now, or ("", "")."""
        problem = self.tenancy.problem(leaf)
        if not problem:
            return "", ""
        if leaf in self.tenancy.refused and leaf not in self.tenancy.tree:
            return QUEUE_NOT_ACCEPTED, f"{problem}; waiting until it is"
        return QUEUE_NOT_FOUND, f"{problem}; waiting for it"

    def hold_for_queue(self, leaf: str, obj: str, job: Job, events: Events) -> bool:
        """Hold ``job`` if its queue cannot take it (with an Event the first time, and again when a gang has more
        members waiting than when it was told); True if held."""
        reason, message = self.queue_problem(leaf)
        if not reason:
            return False
        waiting = self.waiting.setdefault(leaf, {})
        members = len(job.pending) if job.is_gang else 1
        if job.key not in waiting or members > self._told.get(job.key, 0):
            events.emit(obj=obj, kind="Warning", reason=reason, message=message)
            self._told[job.key] = members
        waiting[job.key] = job
        return True

    def admitted(self) -> list[Job]:
        """The jobs whose queue exists now (they leave the waiting list; queue them again)."""
        out: list[Job] = []
        for leaf in list(self.waiting):
            if not self.tenancy.problem(leaf):
                for key, held in self.waiting.pop(leaf).items():
                    self._told.pop(key, None)
                    out.append(held)
        return out

    def drop_waiting(self, key: str) -> None:
        """Pod ``key`` is gone: it waits for no queue."""
        for held in self.waiting.values():
            held.pop(key, None)
        self._told.pop(key, None)

    def held_back(self, leaf: str, request: Mapping[str, float], key: str) -> tuple[str, str]:
        """(reason, message) if ``leaf`` may not start the job ``key`` asking for ``request`` now, else ("", "")."""
        over = self.tenancy.over_ceiling(leaf, request)
        if over:
            return QUEUE_LIMIT, over
        if not self.fair_share or not self.starving:
            self.gated.pop(key, None)
            return "", ""
        counted = key in self.starving.get(leaf, {})
        gated = self.tenancy.fair_share_gate(leaf, request, self.starving_totals, counted=counted)
        if gated:
            self.gated[key] = dict(request)
            return FAIR_SHARE, gated
        self.gated.pop(key, None)
        return "", ""

    def starve(self, key: str, leaf: str, request: Vector) -> None:
        """Job ``key`` of ``leaf`` failed for lack of room: its request counts in the gate's demand."""
        jobs = self.starving.setdefault(leaf, {})
        old = jobs.get(key)
        if old == request:
            return  # failed again for the same: the demand is unchanged
        total = self.starving_totals.setdefault(leaf, {})
        if old is not None:
            add_into(total, old, -1.0)
        add_into(total, request)
        jobs[key] = request
        self.tenancy.demand_changed()

    def fed(self, key: str) -> bool:
        """Job ``key`` is placed or gone: it no longer waits for room. True if it was starving (the jobs the gate
        held back may go now: see :meth:`still_gated`)."""
        for queue, jobs in list(self.starving.items()):
            vector = jobs.pop(key, None)
            if vector is None:
                continue
            if jobs:
                add_into(self.starving_totals[queue], vector, -1.0)
            else:
                del self.starving[queue]
                del self.starving_totals[queue]
            self.tenancy.demand_changed()
            return True
        return False

    def forget(self, key: str) -> bool:
        """Job ``key`` is gone."""
        self.gated.pop(key, None)
        return self.fed(key)

    def still_gated(self, item: QueueItem) -> bool:
        """Whether a job the gate held back would still be held (a queueing hint)."""
        request = self.gated.get(item.key)
        if request is None:
            return False
        counted = item.key in self.starving.get(item.queue, {})
        return bool(self.tenancy.fair_share_gate(item.queue, request, self.starving_totals, counted=counted))
