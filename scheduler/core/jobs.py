"""Jobs: what the loop schedules, preempts and charges to queues, a single pod or a gang (a PodGroup's members).

A :class:`Job` carries its members (pending and placed), its queue (the PodGroup's ``spec.queue`` for a gang, the
pod's ``gpusched.io/queue`` label for a single pod, ``default`` without one), its priority, its topology constraint,
its phase and conditions. :class:`Jobs` is the one place that knows which job a pod belongs to; the loop, tenancy,
preemption, ``gpusched explain``, metrics and status all read the same jobs.

Invariants kept here, whatever order pods and PodGroups arrive in (a restart lists them in any order):

- a pod belongs to at most one job; a pod that names a PodGroup not known yet is an *orphan*: pending, it waits
  for the group; placed, it counts as a single pod of its own queue until the group arrives, then joins the gang;
- a placed pod counts against its job's queue (:meth:`Jobs.queue_of`), derived from the jobs now, not from the
  order the pods were seen in: the loop charges queues again whenever a pod's job changes;
- a gang's members beyond ``minMember`` are placed one by one only while the gang holds ``minMember`` placed
  members; once it does not (its members were preempted or deleted), they wait for the gang to be placed whole;
- an elastic gang (``maxMember``) never holds more than ``maxMember`` placed members: the others wait (``full``);
- a gang's placed members beyond ``minMember`` are its surplus (:meth:`Job.surplus`): the members of highest rank
  (``scheduler.api.crds.podgroup.member_rank``), the first to be preempted; the rest is its core, preempted whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.crds.podgroup import PodGroup, member_rank
from scheduler.api.crds.queue import DEFAULT_QUEUE
from scheduler.api.objects.pod import PodRequest
from scheduler.core.cycle import EMPTY, Context
from scheduler.framework.interface import Status
from scheduler.queue.scheduling import QueueItem

#: What sets a gang's key apart from its pods' keys (the queue holds both); only :class:`Jobs` makes such keys.
GANG_PREFIX = "gang:"


@dataclass(slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    since: float


@dataclass(eq=False)
class Job:
    """One unit of work: a single pod (``group`` None) or a gang; see the module notes."""

    #: The scheduling queue's key: the pod's ``ns/name``, or ``gang:ns/group``.
    key: str
    group: PodGroup | None = None
    #: Members without a node, by pod key (for a single pod: the pod while it waits).
    pending: dict[str, PodRequest] = field(default_factory=dict)
    #: Members on a node (assumed, or bound as the API server shows), by pod key.
    placed: dict[str, PodRequest] = field(default_factory=dict)
    #: Placed members the API server shows Running.
    running: set[str] = field(default_factory=set)
    #: Members that ran to completion (phase Succeeded) or failed: they count for the gang, hold nothing.
    succeeded: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    #: When the job started holding capacity (None while it holds none): the youngest are preempted first.
    started: float | None = None
    phase: str = "Pending"
    first_attempt: float | None = None
    last_schedule: float | None = None
    conditions: dict[str, Condition] = field(default_factory=dict)

    @property
    def is_gang(self) -> bool:
        return self.group is not None

    @property
    def queue(self) -> str:
        """The leaf queue the job counts against."""
        if self.group is not None:
            return self.group.queue or DEFAULT_QUEUE
        pod = next(iter(self.pending.values()), None) or next(iter(self.placed.values()), None)
        return (pod.queue if pod is not None else "") or DEFAULT_QUEUE

    @property
    def priority(self) -> int:
        """A gang's priority is its own or, higher, that of its members (the API server resolves a pod's
        ``priorityClassName`` into ``spec.priority``)."""
        pods = [*self.pending.values(), *self.placed.values()]
        if self.group is None:
            return max((p.priority for p in pods), default=0)
        return max([self.group.priority, *(p.priority for p in pods)])

    @property
    def created(self) -> float:
        """When the job was created: its PodGroup, or its pod (older goes first among equal priorities)."""
        if self.group is not None:
            return self.group.created
        pod = next(iter(self.pending.values()), None) or next(iter(self.placed.values()), None)
        return pod.created if pod is not None else 0.0

    @property
    def satisfied(self) -> bool:
        """Whether the gang holds ``minMember`` placed or completed members (a single pod: whether it is placed)."""
        need = self.group.min_member if self.group is not None else 1
        return len(self.placed) + len(self.succeeded) >= need

    @property
    def missing(self) -> int:
        """How many members a gang still needs placed to hold ``minMember`` placed or completed ones (0 or less:
        none)."""
        assert self.group is not None
        return self.group.min_member - len(self.placed) - len(self.succeeded)

    @property
    def alone_allowed(self) -> bool:
        """Whether a gang's pending members may be placed one by one: the gang holds ``minMember`` placed members
        (the rest join it), or all but one and some placed (a member whose binding failed rejoins its placed
        siblings)."""
        missing = self.missing
        return missing <= 0 or (missing == 1 and bool(self.placed))

    @property
    def full(self) -> bool:
        """Whether an elastic gang holds ``maxMember`` placed members: no other member is placed (completed ones
        hold nothing: a Job with more completions than parallelism goes on)."""
        group = self.group
        return group is not None and 0 < group.max_member <= len(self.placed)

    def surplus(self) -> list[PodRequest]:
        """A gang's placed members beyond ``minMember`` (completed ones count toward it), the one preempted first
        first: the highest rank. [] for a single pod, or a gang at or below its minimum."""
        group = self.group
        if group is None:
            return []
        extra = len(self.placed) + len(self.succeeded) - group.min_member
        if extra <= 0:
            return []
        ranked = sorted(self.placed.values(), key=lambda p: (member_rank(p.labels, p.name), p.key), reverse=True)
        return ranked[:extra]

    @property
    def exists(self) -> int:
        return len(self.pending) + len(self.placed)

    def set_condition(self, type_: str, status: str, reason: str, message: str, now: float) -> None:
        old = self.conditions.get(type_)
        since = old.since if old is not None and old.status == status else now
        self.conditions[type_] = Condition(type_, status, reason, message, since)

    def refresh_phase(self, now: float) -> None:
        """The gang's phase from its members (a user reads it in the PodGroup's status)."""
        group = self.group
        if group is None:
            return
        done = len(self.succeeded)
        if not self.pending and not self.placed and (self.succeeded or self.failed):
            # Every member ended: the job's outcome, not a wait.
            self.phase = "Succeeded" if done >= group.min_member or not self.failed else "Failed"
            message = f"{done} member(s) succeeded, {len(self.failed)} failed"
            self.set_condition("Scheduled", "True" if self.phase == "Succeeded" else "False", self.phase, message, now)
        elif self.running and len(self.running) + done >= group.min_member:
            self.phase = "Running"
        elif self.satisfied:
            self.phase = "Scheduled"
        elif self.exists + done < group.min_member:
            self.phase = "Pending"
            completed = f" ({done} completed)" if done else ""
            self.set_condition(
                "Scheduled",
                "False",
                "WaitingForMembers",
                f"{self.exists + done} of {group.min_member} members exist{completed}",
                now,
            )
        elif self.first_attempt is not None and now - self.first_attempt >= group.schedule_timeout_s:
            self.phase = "Unschedulable"
        elif self.first_attempt is not None:
            self.phase = "Scheduling"


@dataclass(slots=True)
class Attempt:
    """One cycle's try at a queued item of a job: the whole job (its pod, or ``minMember`` members of a gang placed
    together), or one member of a gang tried ``alone`` (beyond ``minMember``, or after its binding failed), placed
    near its placed siblings. Every action of the session reads this, whatever the job is."""

    job: Job
    #: The queue's item: its key, leaf queue and priority, the attempts counted.
    item: QueueItem
    #: The gang member tried by itself, or None when the whole job is tried.
    alone: PodRequest | None = None
    #: The pods this cycle places, all or none (the session chooses them before the actions run).
    members: list[PodRequest] = field(default_factory=list)
    #: What its cycles get from outside (held nodes, the waiting demand, a member's gang's nodes).
    context: Context = EMPTY
    #: The topology level a whole gang must stay inside (its victims come from one domain of it), or None.
    level: int | None = None
    #: Why a whole gang's topology constraint cannot be kept (then nothing is evicted for it), or None.
    unresolved: Status | None = None
    #: A single pod's failed cycle: per node slot, the first reason the node refused it (the preempt action skips
    #: the nodes no eviction can change); None for a gang, or when nothing was refused node by node.
    reasons: np.ndarray | None = None

    @property
    def key(self) -> str:
        return self.item.key

    @property
    def queue(self) -> str:
        return self.item.queue

    @property
    def priority(self) -> int:
        """The priority it was queued at (a gang's member tried alone: its gang's, if higher than its own)."""
        return self.item.priority

    @property
    def whole_gang(self) -> bool:
        """Whether ``minMember`` members of a gang are placed together (else: one pod)."""
        return self.job.group is not None and self.alone is None

    @property
    def obj(self) -> str:
        """How events and messages name it: ``podgroup ns/name`` for a whole gang, else ``pod ns/name``."""
        if self.whole_gang:
            assert self.job.group is not None
            return f"podgroup {self.job.group.key}"
        return f"pod {self.members[0].key}"


class Jobs:
    """Every job the loop knows, and which job each pod belongs to."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        #: Pod key -> job key.
        self._job_of: dict[str, str] = {}
        #: Group key -> pods naming a group that does not exist (yet): pending ones wait, placed ones count as
        #: single pods until it comes.
        self._orphans: dict[str, dict[str, PodRequest]] = {}
        #: Told the key of every job that changed (a member came, was placed, unplaced or left; its group changed;
        #: it came or went): who keeps something per job updates it then, instead of checking every job.
        self._watchers: list[Callable[[str], None]] = []

    def watch(self, watcher: Callable[[str], None]) -> None:
        """Call ``watcher`` with the key of each job that changes from now on."""
        self._watchers.append(watcher)

    def _changed(self, key: str) -> None:
        for watcher in self._watchers:
            watcher(key)

    # --- lookups -----------------------------------------------------------------------------------------------

    def get(self, key: str) -> Job | None:
        return self._jobs.get(key)

    def of_pod(self, pod_key: str) -> Job | None:
        key = self._job_of.get(pod_key)
        return self._jobs.get(key) if key is not None else None

    def gang(self, group_key: str) -> Job | None:
        return self._jobs.get(GANG_PREFIX + group_key)

    def gang_key(self, group_key: str) -> str:
        """The key of the gang of PodGroup ``group_key`` (in the queue, the holds, the gate)."""
        return GANG_PREFIX + group_key

    def queued(self, key: str) -> tuple[Job, PodRequest | None] | None:
        """What a queue item ``key`` stands for: (its job, None) when it is the job's own key (the whole job), or
        (the gang, the pending member) for a gang's member queued alone; None if that is gone."""
        job = self._jobs.get(key)
        if job is not None:
            return job, None
        job = self.of_pod(key)
        member = job.pending.get(key) if job is not None else None
        return (job, member) if job is not None and member is not None else None

    def gangs(self) -> Iterator[Job]:
        return (job for job in self._jobs.values() if job.group is not None)

    def all(self) -> Iterator[Job]:
        return iter(self._jobs.values())

    def waits_for_group(self, pod: PodRequest) -> bool:
        """Whether ``pod`` is already known as waiting for its PodGroup to exist."""
        return bool(pod.pod_group) and pod.key in self._orphans.get(f"{pod.namespace}/{pod.pod_group}", {})

    def queue_of(self, pod: PodRequest) -> str:
        """The leaf queue ``pod`` counts against: its job's, or (not in a job yet) its own label's."""
        job = self.of_pod(pod.key)
        return job.queue if job is not None else (pod.queue or DEFAULT_QUEUE)

    # --- changes -----------------------------------------------------------------------------------------------

    def pod_pending(self, pod: PodRequest) -> Job | None:
        """A pod without a node: its job (created for a single pod), or None while its PodGroup does not exist."""
        if pod.pod_group:
            group_key = f"{pod.namespace}/{pod.pod_group}"
            job = self.gang(group_key)
            if job is None:
                self._orphans.setdefault(group_key, {})[pod.key] = pod
                return None
            self._job_of[pod.key] = job.key
            if pod.key not in job.placed:
                job.pending[pod.key] = pod
            self._changed(job.key)
            return job
        job = self._jobs.get(pod.key)
        if job is None:
            job = self._jobs[pod.key] = Job(pod.key)
            self._job_of[pod.key] = pod.key
        if pod.key not in job.placed:
            job.pending[pod.key] = pod
        self._changed(job.key)
        return job

    def pod_placed(self, pod: PodRequest, *, now: float) -> Job:
        """A pod on a node (placed by the loop, or found bound): its job, which holds it from now on."""
        job = self.of_pod(pod.key)
        if job is None and pod.pod_group:
            job = self.gang(f"{pod.namespace}/{pod.pod_group}")
            if job is not None:
                self._job_of[pod.key] = job.key
            else:
                self._orphans.setdefault(f"{pod.namespace}/{pod.pod_group}", {})[pod.key] = pod
        if job is None:
            job = self._jobs.get(pod.key)
            if job is None:
                job = self._jobs[pod.key] = Job(pod.key)
                self._job_of[pod.key] = pod.key
        job.pending.pop(pod.key, None)
        job.placed[pod.key] = pod
        if pod.phase == "Running":
            job.running.add(pod.key)
        if job.started is None:
            job.started = now
        self._changed(job.key)
        return job

    def pod_unplaced(self, pod: PodRequest) -> Job | None:
        """A placed pod lost its node without leaving (its binding failed): pending again in its job."""
        job = self.of_pod(pod.key)
        if job is None:
            return None
        job.placed.pop(pod.key, None)
        job.running.discard(pod.key)
        job.pending[pod.key] = pod
        if not job.placed:
            job.started = None
        self._changed(job.key)
        return job

    def pod_gone(self, pod_key: str, *, finished: str = "") -> Job | None:
        """The pod was deleted, or ``finished`` (``Succeeded`` or ``Failed``): its job (a single pod's job is gone
        with it), or None. A gang counts its finished members as such."""
        for group_key in [g for g, pods in self._orphans.items() if pod_key in pods]:
            del self._orphans[group_key][pod_key]
            if not self._orphans[group_key]:
                del self._orphans[group_key]
        key = self._job_of.pop(pod_key, None)
        job = self._jobs.get(key) if key is not None else None
        if job is None:
            return None
        job.pending.pop(pod_key, None)
        job.placed.pop(pod_key, None)
        job.running.discard(pod_key)
        if finished == "Succeeded":
            job.succeeded.add(pod_key)
        elif finished == "Failed":
            job.failed.add(pod_key)
        if job.group is None:
            del self._jobs[job.key]
        elif not job.placed:
            job.started = None
        self._changed(job.key)
        return job

    def group_upsert(self, group: PodGroup) -> tuple[Job, list[PodRequest]]:
        """A PodGroup came or changed: its job, and the placed pods that joined it now (counted on its queue)."""
        job = self.gang(group.key)
        if job is None:
            job = self._jobs[GANG_PREFIX + group.key] = Job(GANG_PREFIX + group.key, group)
        else:
            job.group = group
        joined: list[PodRequest] = []
        for pod_key, pod in self._orphans.pop(group.key, {}).items():
            single = self._jobs.get(pod_key)
            if single is not None and single.group is None:
                # Found bound before its group was known: it counted as a single pod until now.
                del self._jobs[pod_key]
                self._changed(pod_key)
                if job.started is None or (single.started is not None and single.started < job.started):
                    job.started = single.started
            self._job_of[pod_key] = job.key
            if pod.node_name or (single is not None and pod_key in single.placed):
                job.placed[pod_key] = pod
                if (single is not None and pod_key in single.running) or pod.phase == "Running":
                    job.running.add(pod_key)
                joined.append(pod)
            else:
                job.pending[pod_key] = pod
        self._changed(job.key)
        return job, joined

    def group_removed(self, group_key: str) -> tuple[Job | None, list[PodRequest]]:
        """The PodGroup was deleted: its job is gone; its pending members wait again for a group of that name and
        its placed members count as single pods of their own queues (returned, to be charged there)."""
        job = self._jobs.pop(GANG_PREFIX + group_key, None)
        if job is None:
            return None, []
        orphans = self._orphans.setdefault(group_key, {})
        for pod_key, pod in job.pending.items():
            self._job_of.pop(pod_key, None)
            orphans[pod_key] = pod
        moved: list[PodRequest] = []
        for pod_key, pod in job.placed.items():
            orphans[pod_key] = pod
            single = self._jobs[pod_key] = Job(pod_key, placed={pod_key: pod}, started=job.started)
            if pod_key in job.running:
                single.running.add(pod_key)
            self._job_of[pod_key] = pod_key
            self._changed(pod_key)
            moved.append(pod)
        if not orphans:
            del self._orphans[group_key]
        self._changed(job.key)
        return job, moved
