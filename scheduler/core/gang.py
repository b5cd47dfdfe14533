"""All-or-nothing placement of a gang (a PodGroup's members).

One cycle places ``minMember`` members on a checkpoint of the snapshot, largest first, each seeing the
placements before it (and preferring the nodes the gang already uses, through the ``gang`` score plugin). If
every one of them fits, all are placed (``scheduler.core.statement``: assumed, then handed to the binder); if any
does not, the snapshot is rolled back and nothing is held. A gang never holds part of the cluster while it waits,
so two gangs that each need more than half the cluster cannot deadlock: whichever is tried first with room runs.

Topology (``PodGroup.spec.topology``, levels of the cluster's Topology): :func:`topology_plan` lists the node masks
to try, in order, and the what-if runs inside each (the ``topology`` filter plugin keeps members in the mask)
until one holds the whole gang:

- ``required``: the domains of that level whose free GPUs can hold every member (best fit, largest member first),
  the tightest first (fewest free GPUs left after the gang), to keep large domains for large jobs; inside each,
  first as few sub-domains as possible (of the ``preferred`` level when it is narrower, else of the next level),
  then the whole domain. No domain that can hold it: unschedulable, with the largest free domain and the nodes
  outside every domain named. Never outside one domain.
- ``preferred``: one domain of that level (the tightest first), then as few domains as possible (the ones with
  most free GPUs first, the last one the tightest that completes the gang), then anywhere.

Segments (``PodGroup.spec.segments``): inside each of those masks, :func:`what_if_in_segments` cuts the members,
lowest index first, into segments of ``size`` and places them one after the other on the same what-if, each
inside one domain of the segment level that can hold it: the domains under the same parent as the segments
before it first (the segments as close as possible), then the tightest. Required: a segment no domain holds
fails the gang; preferred: such a segment is placed anywhere. Only the members placed together are cut, by rank
(``scheduler.core.segment_layout``); a member ranked beyond them (an elastic gang's surplus) joins its gang's
nodes, and a member made again after its node was lost goes back to the domain of its own segment's running
members (only there when the segments are required).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import topology as api_topology
from scheduler.api.crds.podgroup import PodGroup, member_rank
from scheduler.api.crds.topology import TopologyConstraint
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.arrays import ClusterArrays
from scheduler.cache.state import Snapshot
from scheduler.core import capacity, segment_layout
from scheduler.core.cycle import EMPTY, Context, Diagnosis, Scheduler
from scheduler.core.statement import Statement
from scheduler.framework.interface import Code, Decision, Status
from scheduler.kernels import layout

Mask = npt.NDArray[np.bool_]
#: Domains tried in full for one level, tightest first: beyond this the gang waits for the next cycle rather than
#: spending a what-if on every domain of a large cluster.
MAX_DOMAINS = 6


@dataclass(slots=True)
class GangResult:
    status: Status
    decisions: list[Decision] = field(default_factory=list)
    #: The member that did not fit, and why no node could take it.
    blocked: str = ""
    diagnosis: Diagnosis | None = None


def _size(pod: PodRequest) -> tuple[float, ...]:
    return (
        -float(pod.gpu.total_milli),
        -float(pod.resources.get(resources.CPU, 0)),
        -float(pod.resources.get(resources.MEMORY, 0)),
    )


def order_members(members: Sequence[PodRequest]) -> list[PodRequest]:
    """Largest first (GPU, then CPU, then memory), ties by name so the order is stable."""
    return sorted(members, key=lambda p: (*_size(p), p.key))


def core_members(pending: Iterable[PodRequest], need: int) -> list[PodRequest]:
    """The ``need`` members a gang is placed with together, in the order they are placed: those of lowest rank (a
    leader or master, index 0 up: ``member_rank``), so that the core is what stays when an elastic gang's surplus
    is preempted; largest first among them."""
    ranked = sorted(pending, key=lambda p: (member_rank(p.labels, p.name), p.key))
    return order_members(ranked[:need])


def min_resources_short(scheduler: Scheduler, group: PodGroup) -> str:
    """Which of ``spec.minResources`` the cluster does not have free in all, or "" (checked before trying)."""
    if not group.min_resources:
        return ""
    cache = scheduler.cache
    columns = {name: cache.column(name) for name in group.min_resources if name != resources.GPU}
    a = cache.arrays  # after cache.column(), which may add a column
    present = a.base_reason == layout.FIT
    short = []
    for name, amount in group.min_resources.items():
        if name == resources.GPU:
            free = float((a.gpu_free[present] >= layout.WHOLE).sum())
        else:
            free = float(np.maximum(a.cap[present, columns[name]] - a.used[present, columns[name]], 0.0).sum())
        if free < amount:
            short.append(f"{name} (needs {amount}, {free:g} free)")
    return ", ".join(short)


def whole_gpus_short(free_per_node: npt.NDArray[np.int64], needs: Sequence[int], *, held: str = "free") -> str:
    """Why members needing ``needs`` whole GPUs each cannot fit on nodes with ``free_per_node`` free, or "".
    ``held`` says what the figures count (``free`` GPUs, or the nodes' GPUs ``in all``).

    A necessary condition, exact when all members are the same size: for every size ``c`` asked for, the members
    needing ``c`` or more fit only if the nodes hold that many disjoint groups of ``c`` free GPUs, i.e.
    ``sum over nodes of floor(free / c)`` (each such member takes at least one group on its node).
    """
    if not needs:
        return ""
    total = sum(needs)
    free_whole = int(free_per_node.sum())
    if total > free_whole:
        most = int(free_per_node.max()) if free_per_node.size else 0
        return f"the job needs {total} whole GPUs and the cluster has {free_whole} {held} (at most {most} on a node)"
    wanted = sorted(needs, reverse=True)
    for size in sorted(set(wanted), reverse=True):
        members = sum(1 for n in wanted if n >= size)
        groups = int((free_per_node // size).sum())
        if groups < members:
            return (
                f"{members} member(s) need {size}+ whole GPUs on one node and the nodes have room for {groups} "
                f"such group(s)"
            )
    return ""


def never_fits(snapshot: Snapshot, members: Sequence[PodRequest]) -> str:
    """ "" unless the whole GPUs ``members`` ask together can never be had at once on the cluster's schedulable nodes,
    even with nothing else on them; then the sentence that says so and what would change it."""
    a = snapshot.arrays
    per_node = a.gpu_count[a.base_reason == layout.FIT].astype(np.int64)
    short = whole_gpus_short(per_node, [p.gpu.count for p in members if p.gpu.whole], held="in all")
    if not short:
        return ""
    return f"{capacity.NEVER}: {short}; it fits once nodes join, or it asks for fewer members or GPUs."


def gpus_short(scheduler: Scheduler, members: Sequence[PodRequest]) -> str:
    """A necessary condition, cheap to check before a full what-if: enough free GPUs, on enough nodes."""
    a = scheduler.cache.arrays
    present = a.base_reason == layout.FIT
    whole = sum(p.gpu.count for p in members if p.gpu.whole)
    shared = sum(p.gpu.milli for p in members if p.gpu.shared)
    free_per_node = (a.gpu_free[present] >= layout.WHOLE).sum(axis=1)
    short = whole_gpus_short(free_per_node, [p.gpu.count for p in members if p.gpu.whole])
    if short:
        return short
    free_milli = float(a.gpu_free[present].clip(min=0.0).sum())
    if whole * layout.WHOLE + shared > free_milli:
        return f"the gang needs {whole * 1000 + shared} GPU-milli and the cluster has {free_milli:g} free"
    return ""


def place_gang(
    scheduler: Scheduler, group: PodGroup, members: Sequence[PodRequest], context: Context = EMPTY
) -> GangResult:
    """Place ``members`` all together or not at all; on success they are assumed and handed to the binder."""
    result = plan_gang(scheduler, scheduler.cache.snapshot(), group, members, context)
    if result.status.ok:
        statement = Statement(scheduler)
        statement.place(result.decisions)
        statement.commit()
    return result


def plan_gang(
    scheduler: Scheduler,
    snapshot: Snapshot,
    group: PodGroup,
    members: Sequence[PodRequest],
    context: Context = EMPTY,
) -> GangResult:
    """Where ``members`` fit all together, tried on what-ifs of ``snapshot`` (each rolled back, topology kept), or
    why they do not; nothing is committed. ``gpusched explain`` runs it too (:func:`try_gang`), so what it says and
    the gang's condition cannot disagree."""
    short = never_fits(snapshot, members) or gpus_short(scheduler, members)
    if short:
        return GangResult(Status(Code.UNSCHEDULABLE, short, "gang"))
    short = min_resources_short(scheduler, group)
    if short:
        return GangResult(
            Status(Code.UNSCHEDULABLE, f"not enough free in the cluster for minResources: {short}", "gang")
        )
    masks, problem = topology_plan(scheduler, group.topology, members, context, obj=f"podgroup {group.key}")
    if problem is not None:
        return GangResult(problem)
    result = GangResult(Status(Code.UNSCHEDULABLE, "no placement tried", "gang"))
    # Members of a gang whose other members run are kept in the domain those are in (``member_context``).
    siblings = context.topology_slots
    if siblings is not None:
        masks = [_within(mask, siblings) for mask in masks]
    for mask in masks:
        token = snapshot.checkpoint()
        try:
            inside = replace(context, topology_slots=mask) if mask is not None else context
            if group.segment_size:
                result = what_if_in_segments(scheduler, snapshot, group, members, inside)
            else:
                result = what_if(scheduler, snapshot, members, inside)
        finally:
            snapshot.rollback(token)
        if result.status.ok:
            break
    return result


def _within(mask: Mask | None, siblings: Mask) -> Mask:
    """``mask`` (None: anywhere) narrowed to the slots of ``siblings``."""
    if mask is None:
        return siblings
    size = min(mask.shape[0], siblings.shape[0])
    out = np.zeros(mask.shape[0], dtype=bool)
    out[:size] = mask[:size] & siblings[:size]
    return out


def try_gang(
    scheduler: Scheduler, group: PodGroup, members: Sequence[PodRequest], context: Context = EMPTY
) -> GangResult:
    """:func:`plan_gang` on the cache's snapshot of now: what a gang cycle would decide, and nothing it does."""
    return plan_gang(scheduler, scheduler.cache.snapshot(), group, members, context)


def what_if(
    scheduler: Scheduler, snapshot: Snapshot, members: Sequence[PodRequest], context: Context = EMPTY
) -> GangResult:
    """Place ``members`` one after another on ``snapshot`` (inside a checkpoint the caller opened and will roll
    back), largest first; the decisions if all fit, else why the first that did not."""
    taken: dict[int, int] = {}
    inside = replace(context, gang_slots=taken)  # ``taken`` grows as members are placed
    decisions: list[Decision] = []
    for pod in order_members(members):
        result = scheduler.place(pod, snapshot, inside)
        if result.decision is None:
            message = f"member {pod.name} of {len(members)} fits nowhere: {result.status.message}"
            return GangResult(Status(result.status.code, message, "gang"), blocked=pod.key, diagnosis=result.diagnosis)
        slot = scheduler.cache.slot_of(result.decision.node)
        assert slot is not None
        snapshot.place(snapshot.placement(pod, slot, result.decision.gpu_ids))
        taken[slot] = taken.get(slot, 0) + 1
        decisions.append(result.decision)
    return GangResult(Status.success(), decisions)


def what_if_in_segments(
    scheduler: Scheduler,
    snapshot: Snapshot,
    group: PodGroup,
    members: Sequence[PodRequest],
    context: Context = EMPTY,
) -> GangResult:
    """Place ``members`` segment by segment on ``snapshot`` (inside a checkpoint the caller opened and will roll
    back), each segment inside one domain of the group's segment level; see the module notes."""
    obj = f"podgroup {group.key}"
    (required, preferred), problem = resolve_levels(scheduler, group.segment_topology, obj=obj)
    if problem is not None:
        return GangResult(problem)
    level = required if required is not None else preferred
    assert level is not None
    cut = _cut(group, members, context.segments)
    count = len(cut)
    outer = context.topology_slots
    decisions: list[Decision] = []
    parents: set[int] = set()
    for index, (anchor, segment) in enumerate(cut):
        usable, free = free_gpus(snapshot.arrays, context)
        if outer is not None:
            reach = min(outer.shape[0], usable.shape[0])
            usable[:reach] &= outer[:reach]
            usable[reach:] = False
        column = _column(scheduler, level, usable.shape[0])
        parent = _column(scheduler, level - 1, usable.shape[0]) if level > 0 else np.full_like(column, -1)
        needs = [p.gpu.count for p in segment if p.gpu.whole]
        domains = _holding(column, usable, free, needs)
        # Stable: among the domains under a parent already used, and then the others, the tightest first.
        domains.sort(key=lambda d: int(parent[np.argmax(column == d)]) not in parents)
        if anchor:
            # Members of a segment whose other members run: their domain only (or first, when preferred).
            home = int(column[anchor[0]]) if anchor[0] < column.shape[0] else -1
            if home >= 0:  # (its nodes unlabelled: a new segment)
                domains = [home] if home in domains else []
        masks: list[Mask] = [(column == d) & usable for d in domains[:MAX_DOMAINS]]
        if required is None:
            masks.append(usable)
        placed: GangResult | None = None
        for mask in masks:
            token = snapshot.checkpoint()
            result = what_if(scheduler, snapshot, segment, replace(context, topology_slots=mask))
            if result.status.ok:
                snapshot.keep(token)
                placed = result
                break
            snapshot.rollback(token)
        if placed is None:
            name = scheduler.cache.topology.level_label(level)
            message = (
                f"segment {index + 1} of {count} ({len(segment)} members, {sum(needs)} GPUs) fits in no {name}"
                f" ({len(domains)} could hold it by free GPUs)"
            )
            return GangResult(Status(Code.UNSCHEDULABLE, message, "topology"), blocked=segment[0].key)
        decisions.extend(placed.decisions)
        slot = scheduler.cache.slot_of(placed.decisions[0].node)
        if slot is not None and slot < parent.shape[0]:
            parents.add(int(parent[slot]))
    return GangResult(Status.success(), decisions)


def _cut(
    group: PodGroup, members: Sequence[PodRequest], layout: segment_layout.Layout | None
) -> list[tuple[list[int], list[PodRequest]]]:
    """``members`` cut into segments, each with the node slots its running members hold ([] for a new segment):
    by the gang's ``layout`` when some of its members run (each member back into its own segment), else lowest
    rank first, ``size`` at a time."""
    ranked = sorted(members, key=lambda p: (member_rank(p.labels, p.name), p.key))
    size = group.segment_size
    if layout is None:
        return [([], ranked[i : i + size]) for i in range(0, len(ranked), size)]
    by_segment: dict[int, list[PodRequest]] = {}
    loose: list[PodRequest] = []
    for pod in ranked:
        index = layout.segment.get(pod.key)
        if index is None:
            loose.append(pod)
        else:
            by_segment.setdefault(index, []).append(pod)
    cut = [(layout.anchor(index), by_segment[index]) for index in sorted(by_segment)]
    return cut + [([], loose[i : i + size]) for i in range(0, len(loose), size)]


# --- topology -------------------------------------------------------------------------------------------------


def resolve_levels(
    scheduler: Scheduler, constraint: TopologyConstraint, *, obj: str
) -> tuple[tuple[int | None, int | None], Status | None]:
    """The (required, preferred) levels of ``constraint`` in the cluster's Topology, or why they cannot be used:
    a level the Topology lacks, or a profile without the ``topology`` plugin to keep pods in their domain."""
    if not constraint:
        return (None, None), None
    try:
        levels = api_topology.resolve(scheduler.cache.topology, constraint, obj=obj)
    except InvalidObject as problem:
        return (None, None), Status(Code.UNRESOLVABLE, str(problem), "topology")
    if not any(getattr(f, "name", "") == "topology" for f in scheduler.framework.filters):
        message = f"{obj}: the scheduler's profile has no topology plugin, so its topology constraint cannot be kept"
        return (None, None), Status(Code.UNRESOLVABLE, message, "topology")
    return levels, None


def member_context(
    scheduler: Scheduler,
    group: PodGroup,
    placed: Iterable[str],
    base: Context,
    *,
    member: PodRequest | None = None,
    pending: Iterable[PodRequest] = (),
) -> Context:
    """For a member placed after its gang (beyond ``minMember``, or after a bind failure), what its cycle gets on top
    of ``base`` (its job's context): the nodes its ``placed`` siblings are on (the ``gang`` score prefers them) and,
    with a required level, the domain of that level they are in, so it joins them there (the loop's cycle and
    ``gpusched explain`` both use it).

    In a segmented gang, a ``member`` of a segment whose other members run (``pending``: the gang's other waiting
    members, which rank it) joins those: their nodes are the ones preferred and, with required segments, their
    domain of the segment level is the only one it may use."""
    keys = list(placed)
    slots: dict[int, int] = {}
    for key in keys:
        entry = scheduler.cache.pod(key)
        if entry is not None:
            slots[entry.placement.slot] = slots.get(entry.placement.slot, 0) + 1
    gang_slots = slots
    topology: Mask | None = None
    (required, _), problem = resolve_levels(scheduler, group.topology, obj=f"podgroup {group.key}")
    if problem is None and required is not None and slots:
        column = _column(scheduler, required, scheduler.cache.arrays.slots)
        domain = int(column[next(iter(slots))])
        if domain >= 0:
            topology = column == domain
    home = segment_home(scheduler, group, keys, member=member, pending=pending) if member is not None else None
    if home is not None:
        gang_slots = {slot: home.anchor.count(slot) for slot in set(home.anchor)}
        if home.level is not None and home.domain >= 0:  # -1: the segment's nodes lost their label: held to no domain
            inside = _column(scheduler, home.level, scheduler.cache.arrays.slots) == home.domain
            topology = inside if topology is None else _within(topology, inside)
    return replace(base, gang_slots=gang_slots, topology_slots=base.topology_slots if topology is None else topology)


@dataclass(frozen=True, slots=True)
class SegmentHome:
    """Where a member of a segmented gang goes because the other members of its segment run (:func:`segment_home`)."""

    #: Its segment (from 0) and how many segments ``minMember`` members make.
    index: int
    count: int
    #: The node slots its segment's running members are on, one entry per member.
    anchor: list[int]
    #: The level its segments are required in (None: only preferred), and the domain of that level the running
    #: members are in (-1: their node has no label of the level).
    level: int | None
    domain: int


def segment_home(
    scheduler: Scheduler, group: PodGroup, placed: Iterable[str], *, member: PodRequest, pending: Iterable[PodRequest]
) -> SegmentHome | None:
    """Where ``member`` of segmented gang ``group`` is held when other members of its segment run (``placed``: the
    gang's placed members; ``pending``: its other waiting members, which rank it), or None (no segments, or none of
    its segment runs). :func:`member_context` gives its cycle this, and ``gpusched explain`` says it."""
    layout = segment_layout.layout(scheduler.cache, group, placed, [member, *pending])
    index = layout.segment.get(member.key) if layout is not None else None
    anchor = layout.anchor(index) if layout is not None and index is not None else []
    if index is None or not anchor:
        return None
    (required, _), problem = resolve_levels(scheduler, group.segment_topology, obj=f"podgroup {group.key}")
    level = required if problem is None else None
    domain = -1
    if level is not None:
        domain = int(_column(scheduler, level, scheduler.cache.arrays.slots)[anchor[0]])
    count = -(-group.min_member // group.segment_size)
    return SegmentHome(index, count, anchor, level, domain)


def rejoin_context(
    scheduler: Scheduler,
    group: PodGroup,
    placed: Iterable[str],
    context: Context,
    *,
    pending: Iterable[PodRequest] = (),
) -> Context:
    """What a whole-gang attempt gets when some of its members still run (the others were lost with their node and
    made again): :func:`member_context` on top of ``context``, so they go near the others, inside the domain of the
    required level the others are in (:func:`plan_gang` keeps every mask inside it), and wait while it has no room.
    A segmented gang's ``pending`` members also get the layout of its segments, so each goes back to its own
    segment's domain (:func:`what_if_in_segments`)."""
    keys = list(placed)
    if not keys:
        return context
    out = member_context(scheduler, group, keys, context)
    layout = segment_layout.layout(scheduler.cache, group, keys, pending)
    return out if layout is None else replace(out, segments=layout)


def free_gpus(arrays: ClusterArrays, context: Context = EMPTY) -> tuple[Mask, npt.NDArray[np.int64]]:
    """The usable node slots (present, schedulable, not reserved for another job) and their free whole GPUs."""
    a = arrays
    usable = a.base_reason == layout.FIT
    reserved = context.reserved
    if reserved is not None:
        size = min(reserved.shape[0], usable.shape[0])
        usable[:size] &= ~reserved[:size]
    free = np.where(usable, (a.gpu_free >= layout.WHOLE).sum(axis=1), 0).astype(np.int64)
    return usable, free


def _column(scheduler: Scheduler, level: int, slots: int) -> npt.NDArray[np.int64]:
    ids = scheduler.cache.domain_ids()
    column = np.full(slots, -1, dtype=np.int64)
    size = min(ids.shape[0], slots)
    column[:size] = ids[:size, level]
    return column


def _holding(column: npt.NDArray[np.int64], within: Mask, free: npt.NDArray[np.int64], needs: list[int]) -> list[int]:
    """The domains (inside ``within``) that can hold ``needs``, tightest first (fewest free GPUs left)."""
    inside = np.where(within, column, -1)
    totals = api_topology.domain_free(inside, free)
    total = sum(needs)
    found = []
    for domain in np.flatnonzero(totals >= total).tolist():
        if api_topology.holds(free[inside == domain].tolist(), needs):
            found.append((int(totals[domain]) - total, domain))
    return [domain for _, domain in sorted(found)]


def _fewest(column: npt.NDArray[np.int64], within: Mask, free: npt.NDArray[np.int64], needs: list[int]) -> Mask | None:
    """The nodes of as few domains as possible that together hold ``needs``: the domains with most free GPUs
    first, then the last one swapped for the tightest that still completes the set. None if all of them cannot."""
    inside = np.where(within, column, -1)
    totals = api_topology.domain_free(inside, free)
    order = [int(d) for d in np.argsort(-totals, kind="stable") if totals[d] > 0]
    chosen: list[int] = []
    for domain in order:
        chosen.append(domain)
        if api_topology.holds(free[np.isin(inside, chosen)].tolist(), needs):
            break
    else:
        return None
    if len(chosen) < 2:
        return np.asarray(inside == chosen[0], dtype=bool)
    rest = chosen[:-1]
    for domain in sorted(order[len(rest) :], key=lambda d: (int(totals[d]), d)):
        if api_topology.holds(free[np.isin(inside, [*rest, domain])].tolist(), needs):
            return np.isin(inside, [*rest, domain])
    return np.isin(inside, chosen)


def _pack(column: npt.NDArray[np.int64], within: Mask, free: npt.NDArray[np.int64], needs: list[int]) -> list[Mask]:
    """Masks that keep the job in one domain of a level (tightest first), then in as few as possible."""
    masks = [(column == domain) & within for domain in _holding(column, within, free, needs)[:MAX_DOMAINS]]
    if not masks:
        few = _fewest(column, within, free, needs)
        if few is not None:
            masks.append(few & within)
    return masks


def topology_plan(
    scheduler: Scheduler,
    constraint: TopologyConstraint,
    members: Sequence[PodRequest],
    context: Context = EMPTY,
    *,
    obj: str,
    arrays: ClusterArrays | None = None,
) -> tuple[list[Mask | None], Status | None]:
    """The node masks to place a job in, in the order to try them (None: anywhere), or why there are none.

    Free GPUs are read from ``arrays`` (a what-if's snapshot), by default the cache's."""
    (required, preferred), problem = resolve_levels(scheduler, constraint, obj=obj)
    if problem is not None:
        return [], problem
    if required is None and preferred is None:
        return [None], None
    usable, free = free_gpus(arrays if arrays is not None else scheduler.cache.arrays, context)
    needs = [p.gpu.count for p in members if p.gpu.whole]
    levels = len(scheduler.cache.topology.levels)
    if required is None:
        assert preferred is not None
        return [*_pack(_column(scheduler, preferred, usable.shape[0]), usable, free, needs), None], None
    column = _column(scheduler, required, usable.shape[0])
    domains = _holding(column, usable, free, needs)
    if not domains:
        return [], Status(Code.UNSCHEDULABLE, _none_holds(scheduler, required, column, free, needs), "topology")
    inner = preferred if preferred is not None and preferred > required else required + 1
    masks: list[Mask | None] = []
    for domain in domains[:MAX_DOMAINS]:
        whole = (column == domain) & usable
        if inner < levels:
            masks.extend(_pack(_column(scheduler, inner, usable.shape[0]), whole, free, needs))
        masks.append(whole)
    return masks, None


def _none_holds(
    scheduler: Scheduler, level: int, column: npt.NDArray[np.int64], free: npt.NDArray[np.int64], needs: list[int]
) -> str:
    """Why no domain of ``level`` can hold the job now, or never can as the cluster is (no node has the level's
    label; the largest domain has fewer GPUs in all than the job asks)."""
    topology = scheduler.cache.topology
    name, label = topology.level_label(level), topology.levels[level]
    a = scheduler.cache.arrays
    present = a.base_reason != layout.ABSENT
    if not (present & (column >= 0)).any():
        return f"{capacity.NEVER}: no node has the label {label} of level {name}; it fits once nodes are labelled"
    asked = f"{sum(needs)} GPUs" if sum(needs) else "the gang"
    totals = api_topology.domain_free(column, free)
    largest = int(totals.max()) if totals.size else 0
    in_all = api_topology.domain_free(column, np.where(a.base_reason == layout.FIT, a.gpu_count, 0).astype(np.int64))
    most = int(in_all.max()) if in_all.size else 0
    if most < sum(needs):
        message = f"{capacity.NEVER}: no {name} can hold {asked}: the largest has {most} GPUs in all"
    else:
        message = f"no {name} can hold {asked}: largest free {largest}"
        if needs and largest >= sum(needs):
            message += f", but not as {len(needs)} members of {'/'.join(str(n) for n in sorted(set(needs)))} GPUs"
    outside = int((present & (column < 0)).sum())
    if outside:
        message += f"; {outside} node{'s' if outside > 1 else ''} outside every {name} (no label {label})"
    if most < sum(needs):
        message += f"; it fits once a {name} that large forms, or it asks for fewer GPUs"
    return message
