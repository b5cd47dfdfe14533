"""The status publisher: what the core knows about PodGroups, Queues, Reservations and waiting pods, handed to their
writers.

:class:`StatusPublisher` owns the status writers of the custom resources (PodGroup, Queue, Reservation, Topology)
and decides what they write; the writers (``scheduler.k8s.status``) coalesce, skip unchanged values and format the
core's numbers into Kubernetes quantities. Invariants kept here:

- Only the leader writes: :meth:`StatusPublisher.publish` and :meth:`queue_refused` do nothing on a standby (the
  Topology's writer holds its one write until this replica may write).
- A pod is told why it waits even when no cycle says it: gang members waiting for their siblings to exist once
  the gang has been short for :data:`MEMBERS_GRACE_S`, pods whose PodGroup is still missing after
  :data:`GROUP_GRACE_S` (``kubectl apply`` of a file holding both often delivers the pod first), pods of ours that
  cannot be read; an Event is written per change of that message, not per publication.
- The per-pod state kept here (the message last told, the PodGroupNotFound grace) is dropped when the pod leaves
  (:meth:`forget_pod`, called by the pod feed); a gang's members grace when it is no longer short of members.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.crds import queue as api_queue
from scheduler.api.objects.pod import PodRequest
from scheduler.core.jobs import Job
from scheduler.core.loop import SchedulingLoop
from scheduler.k8s import status as k8s_status
from scheduler.k8s.context import OperatorContext

#: Seconds between writes of PodGroup and Queue status (per object; unchanged values are not written).
STATUS_INTERVAL_S = 2.0
#: Seconds a pod may wait for its PodGroup before ``PodGroupNotFound`` is told: ``kubectl apply`` of a file
#: holding both often delivers the pod first.
GROUP_GRACE_S = 5.0
#: Seconds a gang may be short of members before its members are told so: a Job controller (Kueue unsuspending
#: a Job) creates the pods of one Job within a second or so, and each condition written on a member meanwhile is a
#: pod update its controller reacts to while it is still creating the others; kube-scheduler writes nothing there.
MEMBERS_GRACE_S = 5.0


class StatusPublisher:
    """PodGroup, Queue and Topology status and the conditions of waiting pods; see the module notes."""

    def __init__(
        self, context: OperatorContext, *, loop: SchedulingLoop, may_write_topology: Callable[[], bool]
    ) -> None:
        client = context.client
        self.loop = loop
        self.recorder = context.recorder
        self.conditions = context.conditions
        self._leading = context.leading
        settings = k8s_status.StatusSettings(interval=STATUS_INTERVAL_S)
        self.group_status = k8s_status.CustomStatusWriter(
            client, k8s_status.PODGROUPS, settings=settings, may_write=context.leading
        )
        self.queue_status = k8s_status.CustomStatusWriter(
            client, k8s_status.QUEUES, settings=settings, may_write=context.leading
        )
        self.reservation_status = k8s_status.CustomStatusWriter(
            client, k8s_status.RESERVATIONS, settings=settings, may_write=context.leading
        )
        self.topology_status = k8s_status.TopologyStatusWriter(
            client, may_write=may_write_topology, spawn=context.spawn
        )
        #: Queues that cannot be used: name -> why (unreadable, or refused by the tree), for their status condition.
        self.queue_problems: dict[str, str] = {}
        #: Per queue, its Accepted condition.
        self._queue_accepted = k8s_status.AcceptedConditions(context.clock)
        #: Pods naming a PodGroup not seen yet: key -> (since, time.monotonic(), the message once the grace is over).
        self._group_missing: dict[str, tuple[float, str]] = {}
        #: The last periodic message told per pod (members waiting for members), so an Event is written per change.
        self._told: dict[str, str] = {}
        #: Per gang short of members: since when (time.monotonic()) it has been seen short.
        self._short_since: dict[str, float] = {}

    def start(self) -> None:
        self.group_status.start()
        self.queue_status.start()
        self.reservation_status.start()

    async def close(self) -> None:
        for writer in (self.group_status, self.queue_status, self.reservation_status):
            await writer.close()

    # --- what the feed and the core's ports tell -----------------------------------------------------------------

    def leadership_changed(self) -> None:
        """The lease was taken or lost: every status and condition is written again by whoever leads next (what
        this replica wrote before may have been overwritten by another leader since)."""
        self.group_status.leadership_changed()
        self.queue_status.leadership_changed()
        self.reservation_status.leadership_changed()
        self.conditions.leadership_changed()
        self._told.clear()

    def forget_pod(self, key: str) -> None:
        self._group_missing.pop(key, None)

    def forget_queue(self, name: str) -> None:
        self.queue_status.forget(name)
        self._queue_accepted.forget(name)

    def group_missing(self, key: str, message: str) -> None:
        """The loop says pod ``key`` names a PodGroup that does not exist: told after :data:`GROUP_GRACE_S` if the
        group is still missing then."""
        self._group_missing.setdefault(key, (time.monotonic(), message))

    def queue_refused(self, name: str, message: str) -> None:
        """Mark a Queue that cannot be used in its status (``Accepted=False``), not only with an Event."""
        self.queue_problems[name] = message
        if self._leading():
            condition = self._queue_accepted.condition(name, "False", "Invalid", message)
            self.queue_status.update(name, {"conditions": [condition]})

    # --- publication -------------------------------------------------------------------------------------------

    def publish(
        self,
        *,
        podgroups: Mapping[str, api_podgroup.PodGroup],
        queues: Mapping[str, api_queue.QueueSpec],
        pending: Mapping[str, PodRequest],
        unreadable: Mapping[str, tuple[str, str]],
    ) -> None:
        """Hand the PodGroup and Queue status and the conditions of waiting pods to their writers (which skip
        unchanged values). The arguments are the pod feed's: PodGroups, Queues, pods of ours waiting for a node,
        and the ones that cannot be read (key -> (uid, why))."""
        if not self._leading():
            return
        for key in list(podgroups):
            status = self.loop.group_status(key)
            job = self.loop.gang(key)
            if status is not None and job is not None and job.group is not None:
                status["members"] = f"{len(job.placed)}/{job.group.min_member}"
                status["pending"] = len(job.pending)
                self.group_status.update(key, status)
        for key in list(self.loop.reservations.entries):
            body = self.loop.reservations.status(key)
            if body is not None:
                held = body["held"]
                if isinstance(held, Mapping):
                    body["held"] = k8s_status.quantities(held)
                self.reservation_status.update(key, body)
        # Both walk every pending and every placed job: not for a cluster without Queues (there is nothing to write).
        statuses = self.loop.queue_statuses() if queues else {}
        jobs = self._queue_jobs() if queues else {}
        for name in queues:
            numbers = statuses.get(name)
            if numbers is None:
                problem = self.queue_problems.get(name) or f"queue {name!r} could not be used"
                self.queue_refused(name, problem)
                continue
            self.queue_problems.pop(name, None)
            body = k8s_status.queue_status(numbers)
            body["pendingJobs"], body["admittedJobs"] = jobs.get(name, (0, 0))
            body["conditions"] = [self._queue_accepted.condition(name, "True", "Accepted", "the queue is in use")]
            self.queue_status.update(name, body)
        self._tell_waiting_pods(podgroups, pending, unreadable)

    def _queue_jobs(self) -> dict[str, tuple[int, int]]:
        """Per queue (leaves and, summed, their ancestors): (jobs waiting in the queue, jobs holding capacity)."""
        tree = self.loop.tenancy.tree
        pending: dict[str, int] = {}
        admitted: dict[str, int] = {}
        for item in self.loop.queue.items():
            pending[item.queue] = pending.get(item.queue, 0) + 1
        for job in self.loop.jobs.all():
            if job.placed:
                admitted[job.queue] = admitted.get(job.queue, 0) + 1
        out: dict[str, list[int]] = {}
        for index, counts in enumerate((pending, admitted)):
            for leaf, n in counts.items():
                if leaf not in tree:
                    continue
                for name in (leaf, *tree.ancestors(leaf)):
                    out.setdefault(name, [0, 0])[index] += n
        return {name: (n[0], n[1]) for name, n in out.items()}

    def _tell_waiting_pods(
        self,
        podgroups: Mapping[str, api_podgroup.PodGroup],
        pending: Mapping[str, PodRequest],
        unreadable: Mapping[str, tuple[str, str]],
    ) -> None:
        """Conditions (and an Event per change) for the pods the cycles say nothing about: gang members waiting
        for their siblings to exist (after :data:`MEMBERS_GRACE_S`), pods whose PodGroup is still missing after
        :data:`GROUP_GRACE_S`, pods of ours that cannot be read."""
        told: dict[str, str] = {}
        now = time.monotonic()
        short_since: dict[str, float] = {}
        for job in self.loop.jobs.gangs():
            group = job.group
            if group is not None and job.full:
                # An elastic gang at its maximum: its other members wait for a placed one to leave, no cycle says so.
                message = (
                    f"waiting for gang {group.key}: it runs its maxMember of {group.max_member} members; this one "
                    "is placed when one of them leaves"
                )
                for member in job.pending.values():
                    told[member.key] = message
                    self.conditions.unschedulable(member, message)
                    if self._told.get(member.key) != message:
                        self.recorder.emit(
                            obj=f"pod {member.key}", kind="Normal", reason="WaitingForGang", message=message
                        )
                continue
            if group is None or job.satisfied:
                continue
            if job.exists >= group.min_member:
                # Every member exists: the next attempt's FailedScheduling says why it waits; until then, a member
                # told that members were missing is told that they are all there.
                message = (
                    f"waiting for gang {group.key}: all {group.min_member} members exist; the gang waits its turn"
                    f" in queue {job.queue}"
                )
                for member in job.pending.values():
                    said = self.conditions.said.get(member.key, "")
                    if said.startswith(f"waiting for gang {group.key}: ") and "members exist; the gang is" in said:
                        self.conditions.unschedulable(member, message)
                continue
            since = short_since[group.key] = self._short_since.get(group.key, now)
            if now - since < MEMBERS_GRACE_S:
                continue  # its controller is most likely still creating them
            message = (
                f"waiting for gang {group.key}: {job.exists} of {group.min_member} members exist; "
                f"the gang is tried once {group.min_member - job.exists} more are created"
            )
            for member in job.pending.values():
                told[member.key] = message
                self.conditions.unschedulable(member, message)
                if self._told.get(member.key) != message:
                    self.recorder.emit(obj=f"pod {member.key}", kind="Normal", reason="WaitingForGang", message=message)
        self._told = told
        self._short_since = short_since
        for key, (since, message) in list(self._group_missing.items()):
            pod = pending.get(key)
            if pod is None or self.loop.job_of(key) is not None or pod.pod_group == "":
                del self._group_missing[key]  # gone, or its group came
            elif now - since >= GROUP_GRACE_S and f"{pod.namespace}/{pod.pod_group}" not in podgroups:
                del self._group_missing[key]
                self.recorder.emit(obj=f"pod {key}", kind="Warning", reason="PodGroupNotFound", message=message)
                self.conditions.unschedulable(pod, message)
        for key, (uid, message) in unreadable.items():
            self.conditions.unschedulable_key(key, uid, message)
        self._tell_waiting_for_queue()

    def _tell_waiting_for_queue(self) -> None:
        """Work held for a queue that does not exist or is not accepted is never tried, so no cycle tells it
        why it waits. The gate tells it when it first holds it, but a standby's telling is written by nobody, and
        after a failover nothing would tell it again: the pod waited with no condition and no Event. Each status
        round, a held pod not yet told this wait gets its Event and condition (unchanged ones are skipped)."""
        gate = self.loop.gate
        for leaf, jobs in gate.waiting.items():
            reason, message = gate.queue_problem(leaf)
            if not reason:
                continue  # its queue takes it now: the next enqueue lets it in
            for job in jobs.values():
                told = message if job.group is None else gang_wait(job, message)
                for member in job.pending.values():
                    if self.conditions.said.get(member.key) == told:
                        continue
                    self.recorder.emit(obj=f"pod {member.key}", kind="Warning", reason=reason, message=told)
                    self.conditions.unschedulable(member, told)


def gang_wait(job: Job, message: str) -> str:
    """What a gang's waiting member is told when its gang waits for ``message``."""
    group = job.group
    assert group is not None
    return f"waiting for gang {group.key}: {len(job.placed)} of {group.min_member} members placed; {message}"
