"""Why a pod or a gang waits, or how a queue stands, told from the loop's state as it is now: what ``gpusched
explain`` answers (``scheduler.k8s.serve.explain`` carries it over HTTP and checks who may read it; the simulator can
ask it
directly).

It writes nothing and takes milliseconds: it reads the loop, its cache and its queue, and a gang's what-if is placed
on the cache's snapshot inside a checkpoint that is rolled back. The caller makes sure no cycle runs meanwhile (the
operator answers on its event loop).

What it tells is what the session would try now, read the session's own way: a pod is the attempt of that pod by
itself, a gang the attempt of its ``minMember`` members together (``session.fill``: the same members, topology level
and held nodes the cycle gets), filtered by the cycle's own filtering (``Scheduler.filter``) or placed by its own
what-if (``gang.try_gang``), so an explanation cannot disagree with a cycle. The free-GPU figure counts only nodes the
pod may use (not tainted against it, selected, schedulable); a gang member says it waits for its gang. Work no node
could ever hold as the cluster is says so, and what would change it (``scheduler.core.capacity``), instead of what
would have to free up.

Numbers are written by the caller's :class:`Units` (the operator's: Kubernetes quantities, ``2500m`` CPU, ``256Gi``
memory, ``0.5`` GPUs, and shares as the Queue's status shows them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects import admission
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache
from scheduler.core import actions, capacity, gang, holds, reason_texts, registry, session
from scheduler.core.cycle import Scheduler
from scheduler.core.holds import Kind
from scheduler.core.jobs import Attempt, Job
from scheduler.core.loop import SchedulingLoop
from scheduler.kernels import layout
from scheduler.queue.scheduling import QueueItem

#: Node names shown per reason.
SHOWN = 5


class NotFound(Exception):
    """The object named is not one the scheduler knows."""


@dataclass(frozen=True, slots=True)
class Units:
    """How an explanation writes the core's numbers."""

    #: A resource vector (the core's units: CPU in milli-cores, memory in bytes, GPUs in GPUs) as text, "nothing"
    #: when it holds nothing.
    amounts: Callable[[Mapping[str, float]], str]
    #: A share (0..1, or below 0 for a rank below the guarantee).
    share: Callable[[float], str]


@dataclass(frozen=True, slots=True)
class Live:
    """What an explanation reads: the loop as it is now, and what its feed knows beside it."""

    loop: SchedulingLoop
    #: The pods waiting for a node, by key, as the feed saw them (a pod whose PodGroup does not exist included).
    pending: Mapping[str, api_pod.PodRequest]
    units: Units
    #: Pods whose spec could not be read: key -> (uid, why).
    unreadable: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: What each waiting pod's ``PodScheduled=False`` condition said last.
    said: Mapping[str, str] = field(default_factory=dict)
    #: Queues that are not in use, and why.
    queue_problems: Mapping[str, str] = field(default_factory=dict)
    #: Pods held by scheduling gates (Kueue's, for one): never tried, they wait for admission.
    gated: Mapping[str, admission.Gated] = field(default_factory=dict)

    @property
    def scheduler(self) -> Scheduler:
        return self.loop.scheduler

    @property
    def cache(self) -> Cache:
        return self.loop.scheduler.cache


def explain_pod(live: Live, key: str) -> str:
    """Why pod ``key`` waits (or where it runs); NotFound if the scheduler does not know it."""
    pod = live.pending.get(key)
    lines = [f"pod {key}"]
    if pod is None:
        held = live.cache.pod(key)
        if held is not None:
            node = live.cache.snapshot().names[held.placement.slot]
            return "\n".join([*lines, f"  on node {node}: not pending"])
        unreadable = live.unreadable.get(key)
        if unreadable is not None:
            return "\n".join([*lines, f"  cannot be read: {unreadable[1]}"])
        held_back = live.gated.get(key)
        if held_back is not None:
            return "\n".join([*lines, f"  {held_back.text()}"])
        raise NotFound(f"pod {key} is not a pending pod of gpusched (schedulerName: gpusched) that it knows")
    said = live.said.get(key)
    if said:
        lines.append(f"  last said (PodScheduled=False Unschedulable): {said}")
    job = live.loop.job_of(key)
    if job is not None and job.group is not None:
        group = job.group
        lines.append(
            f"  member of gang {group.key} (minMember {group.min_member}): {len(job.placed)} placed, {job.exists}"
            f" exist; it is placed only together with its gang (gpusched explain podgroup/{group.name}"
            f" -n {group.namespace})"
        )
    elif pod.pod_group:
        lines.append(f"  waits for its PodGroup {pod.namespace}/{pod.pod_group}, which does not exist")
    lines += _filters(live, pod)
    if job is None or job.group is None:
        lines += _action_lines(live, _job_key(live, pod), [pod], whole_gang=False, level=None)
    lines += _queue_lines(live, pod)
    return "\n".join(lines)


def _action_lines(
    live: Live, job_key: str, members: list[api_pod.PodRequest], *, whole_gang: bool, level: int | None
) -> list[str]:
    """What each of the profile's actions is doing, or would do now, for the job (``Action.explain``: consolidation
    says the plan it carries out or would, or why none exists, on the cycle's context)."""
    asked = actions.Asked(job_key, members, live.cache.snapshot(), whole_gang, level, live.loop.cycle_context(job_key))
    return [line for action in live.loop.actions for line in action.explain(asked)]


def _job_key(live: Live, pod: api_pod.PodRequest) -> str:
    """The key the queue and the holds know ``pod``'s work by: its gang's while the gang is not placed."""
    job = live.loop.job_of(pod.key)
    return job.key if job is not None and job.group is not None and not job.satisfied else pod.key


def _attempt(live: Live, pod: api_pod.PodRequest) -> Attempt:
    """``pod`` tried by itself as the session tries a single pod or a gang's member alone (``session.fill``: near
    its placed siblings, inside their domain and, in a segmented gang, its own segment's), with what the loop gives
    the queue item its work waits under (``SchedulingLoop.cycle_context``: the nodes held for other jobs). A pod
    whose PodGroup does not exist yet is tried as a single pod."""
    job = live.loop.job_of(pod.key) or Job(pod.key, pending={pod.key: pod})
    key = _job_key(live, pod)
    attempt = Attempt(job, QueueItem(key, pod.priority, pod.created, live.loop.queue_of(pod)), alone=pod)
    session.fill(live.scheduler, attempt, live.loop.cycle_context(key))
    return attempt


def _filters(live: Live, pod: api_pod.PodRequest) -> list[str]:
    snapshot = live.cache.snapshot()
    attempt = _attempt(live, pod)
    job, key = attempt.job, attempt.key
    held = ""
    if job.group is not None and (key == pod.key or job.placed):
        # Placed alone after its gang, or its gang placed again around members that still run: what holds it to
        # its segment's nodes.
        home = gang.segment_home(live.scheduler, job.group, job.placed, member=pod, pending=job.pending.values())
        held = _segment_text(live, job.group, home) if home is not None else ""
    filtered = live.scheduler.filter(pod, snapshot, attempt.context)
    reasons = filtered.reasons
    if reasons is None:
        return [f"  {filtered.status.message}"]
    names = snapshot.names
    failing: dict[str, list[str]] = defaultdict(list)
    fit = 0
    for slot, code in enumerate(reasons.tolist()):
        node = names[slot] if slot < len(names) else None
        if node is None or code == layout.ABSENT:
            continue
        if code == layout.FIT:
            fit += 1
        else:
            failing[reason_texts.node_text(snapshot, pod, code, slot)].append(node)
    total = fit + sum(len(v) for v in failing.values())
    lines = [f"  nodes: {fit} of {total} pass every filter"]
    for reason, nodes in sorted(failing.items(), key=lambda kv: -len(kv[1])):
        more = f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
        lines.append(f"    {len(nodes)} {reason}: {', '.join(sorted(nodes)[:SHOWN])}{more}")
    if held:
        lines.append(f"  {held}")
    lines += _reservation_lines(live, key)
    never = capacity.pod_never_fits(snapshot, pod, filtered.state.request, reasons) if fit == 0 else ""
    if never:
        return [*lines, f"  {never}"]
    if pod.gpu.whole and pod.gpu.count:
        a = snapshot.arrays
        codes = reasons[: len(names)]
        # A node refused only for want of room (its filter declares it so) still counts its free GPUs.
        eligible = np.flatnonzero(registry.REASONS.short_of_room(codes))
        free = (a.gpu_free[eligible] >= layout.WHOLE).sum(axis=1) if eligible.size else np.zeros(0, dtype=np.int64)
        best = int(free.max()) if free.size else 0
        where = names[int(eligible[int(free.argmax())])] if free.size and best else "no node"
        lines.append(
            f"  GPUs: it needs {pod.gpu.count} whole GPUs on one node; the most free on one node it may use"
            f" (taints, selectors, cordons considered): {best} ({where})"
        )
        if fit == 0 and eligible.size and best < pod.gpu.count:
            lines.append(
                f"  to fit: {pod.gpu.count - best} more GPUs must free up on such a node, or a node with"
                f" {pod.gpu.count} free GPUs it may use must join"
            )
    if fit == 0:
        lines.append("  it waits: what keeps it off each node above can change (room freed, holds released)")
    return lines


def _reservation_lines(live: Live, key: str) -> list[str]:
    """The Reservations whose room job ``key`` may not use, or is confined to (it is one of their users)."""
    lines = []
    names = live.cache.names
    for hold in live.loop.holds.of_kind(Kind.RESERVATION):
        if hold.job == key:
            continue
        nodes = ", ".join(sorted(names[slot] or "" for slot in np.flatnonzero(hold.slots) if slot < len(names)))
        left = None if hold.until is None else max(0.0, hold.until - live.loop.clock())
        until = f" for {left:.0f}s more" if left is not None else ""
        name = holds.reservation_of(hold)
        if key in hold.only:
            lines.append(f"  named by Reservation {name}: it goes only into the room it holds on {nodes}{until}")
        else:
            lines.append(f"  Reservation {name} holds {nodes}{until} for the pods it names: not for this one")
    return lines


def _segment_text(live: Live, group: PodGroup, home: gang.SegmentHome) -> str:
    """What holds a replacement member of a segmented gang where its segment runs (the restriction its cycle gets
    from ``gang.member_context``), so that a node left out for it is not a mystery."""
    cache = live.cache
    names = cache.snapshot().names
    nodes = sorted({names[slot] or f"slot {slot}" for slot in home.anchor if slot < len(names)})
    shown = ", ".join(nodes[:SHOWN]) + (f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else "")
    each = f"spec.segments: {group.segment_size} members each"
    head = f"segment {home.index + 1} of {home.count}"
    if home.level is None:
        return f"{head} ({each}): the other members of its segment run on {shown}, which it prefers"
    level, label = cache.topology.level_label(home.level), cache.topology.levels[home.level]
    head += f" ({each}, required in one {level}): the other members of its segment run on {shown}"
    if home.domain < 0:
        return f"{head}, which have no label {label}: it is held to no {level}, only drawn to those nodes"
    entry = cache.nodes.get(home.anchor[0])
    value = entry.info.labels.get(label, "") if entry is not None else ""
    return f"{head}, so it may use only {level} {value} ({label}={value})"


def _share(live: Live, value: float | None) -> str:
    """A share as the queue's status shows it; "-" where it has none."""
    return "-" if value is None else live.units.share(value)


def _queue_lines(live: Live, pod: api_pod.PodRequest) -> list[str]:
    loop = live.loop
    job = loop.job_of(pod.key)
    leaf = loop.queue_of(pod)
    problem = loop.tenancy.problem(leaf)
    if problem:
        return [f"  queue: {problem}; the pod waits for it"]
    key = job.key if job is not None and job.group is not None and not job.satisfied else pod.key
    loop.sort_pending()  # the order as the next cycle will read it
    position = loop.queue.position(key)
    where = dict(loop.queue.pending()).get(key, "")
    waiting = sum(1 for _, w in loop.queue.pending() if w == "active")
    status = loop.queue_statuses().get(leaf)
    if position is not None:
        place = f"position {position + 1} of {waiting} ready to be tried"
    elif where == "unschedulable":
        place = "waiting for a change in the cluster that may let it fit (node added, pod deleted, queue changed)"
    elif where == "backoff":
        place = "in backoff after a failed attempt"
    else:
        place = "not in the queue"
    rank, fair = (None, None) if status is None else (status.rank_share, status.fair_share)
    return [
        f"  queue {leaf}: {place}; the queue holds {live.units.amounts(loop.held(leaf))}; share beyond guarantee"
        f" over weight {_share(live, rank)} (lower goes first); fair share {_share(live, fair)}"
    ]


def explain_group(live: Live, key: str) -> str:
    """Why gang ``key`` (``ns/name`` of its PodGroup) waits; NotFound if the scheduler does not know it."""
    loop = live.loop
    state = loop.gang(key)
    if state is None or state.group is None:
        raise NotFound(f"podgroup {key}: no such PodGroup (or it could not be read)")
    group = state.group
    lines = [
        f"podgroup {key}: minMember {group.min_member}, {len(state.pending)} pending and {len(state.placed)}"
        f" placed members, queue {state.queue}, phase {state.phase}",
    ]
    for condition in state.conditions.values():
        lines.append(f"  {condition.type}={condition.status} {condition.reason}: {condition.message}")
    need = state.missing
    if need <= 0:
        return "\n".join([*lines, "  the gang is placed; remaining members are placed one by one"])
    if len(state.pending) < need:
        return "\n".join(
            [
                *lines,
                f"  waiting for members: {len(state.pending)} of the {need} still needed exist; the gang is"
                " tried once they do",
            ]
        )
    # The session's own attempt of the gang (the same members, topology level and held nodes) placed by the cycle's
    # own what-if (gang.try_gang: the cheap checks, the topology's domains), so what this says and the gang's
    # Scheduled condition cannot disagree.
    attempt = Attempt(state, QueueItem.of(state))
    session.fill(live.scheduler, attempt, loop.cycle_context(state.key))
    members = attempt.members
    result = gang.try_gang(live.scheduler, group, members, attempt.context)
    if result.status.ok:
        nodes = sorted({d.node for d in result.decisions})
        kept = f", inside its topology ({_topology_text(group.topology)})" if group.topology else ""
        lines.append(
            f"  a placement exists now for {need} members (on {', '.join(nodes[:SHOWN])}"
            f"{' ...' if len(nodes) > SHOWN else ''}{kept}): the gang waits its turn in the queue"
        )
    else:
        lines.append(f"  placing {need} members together now fails: {result.status.message}")
        lines += _action_lines(live, state.key, members, whole_gang=True, level=attempt.level)
    lines += _queue_lines(live, members[0])
    return "\n".join(lines)


def _topology_text(constraint: TopologyConstraint) -> str:
    levels = (("required", constraint.required), ("preferred", constraint.preferred))
    return ", ".join(f"{word} level {level}" for word, level in levels if level)


def explain_queue(live: Live, name: str) -> str:
    """How queue ``name`` stands: its guarantee and limits, what it holds and borrows, its waiting work and its
    place in the order; NotFound if there is no such queue."""
    loop = live.loop
    tree = loop.tenancy.tree
    if name not in tree:
        problem = live.queue_problems.get(name)
        if problem:
            return f"queue {name}: not in use: {problem}"
        raise NotFound(f"queue {name}: no such Queue")
    spec = tree.spec(name)
    status = loop.queue_statuses().get(name)
    leaves = sorted(tree.leaves(), key=loop.tenancy.rank)
    kind = "leaf" if tree.is_leaf(name) else "parent"
    amounts = live.units.amounts
    lines = [f"queue {name}: {kind}, parent {spec.parent or '-'}, weight {spec.weight:g}, priority {spec.priority}"]
    lines.append(f"  guarantee: {amounts(spec.guaranteed)}; limit: {amounts(spec.limit) if spec.limit else 'none'}")
    if spec.borrowing_limit or not spec.borrowing_allowed:
        allowed = "" if spec.borrowing_allowed else " (borrowing not allowed)"
        lines.append(f"  borrowing limit: {amounts(spec.borrowing_limit)}{allowed}")
    if status is None:  # not in use: it holds nothing, nothing waits in it
        lines.append("  holds: nothing; borrowed: nothing")
        lines.append("  waiting: 0 pods (0 gangs); shares: dominant -, fair -")
    else:
        lines.append(f"  holds: {amounts(status.allocated)}; borrowed: {amounts(status.borrowed)}")
        lines.append(
            f"  waiting: {status.pending_pods} pods ({status.pending_gangs} gangs); shares: dominant"
            f" {live.units.share(status.dominant_share)}, fair {live.units.share(status.fair_share)}"
        )
    if name in leaves:
        lines.append(
            f"  order: {leaves.index(name) + 1} of {len(leaves)} leaf queues, by share beyond guarantee over weight"
            f" {_share(live, status.rank_share if status is not None else None)} (lower goes first)"
        )
    return "\n".join(lines)
