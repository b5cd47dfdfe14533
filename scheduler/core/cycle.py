"""The scheduling cycle for one pod: snapshot, filter, score, pick, reserve, assume, hand to the binder.

Orchestration only: what fits and what scores well is decided by plugins (through kernels). A cycle that
finds no node keeps why, as counts of nodes per reason, for the pod's event and for ``gpusched explain``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.api.devices.dra import ClaimAllocation
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.arrays import Placement
from scheduler.cache.state import Cache, Snapshot
from scheduler.core import capacity, reason_texts, registry, segment_layout
from scheduler.core.extension_points import Framework
from scheduler.framework import interface
from scheduler.framework import reasons as framework_reasons
from scheduler.framework.interface import Code, CycleState, Decision, Status
from scheduler.kernels import layout


@dataclass(frozen=True, slots=True)
class NominatedPod:
    """A single pod nominated to node ``slot`` by its preemption, which the cycles of pods of its priority or lower
    count there (:meth:`Scheduler.add_nominated`)."""

    pod: PodRequest
    slot: int
    #: What it asks for, per resource column (``Cache.request_vector``).
    request: np.ndarray = field(repr=False)
    #: The pods its preemption evicted (keys): those still on the node are gone when it binds, so its devices are
    #: chosen as if they were gone already.
    victims: tuple[str, ...] = ()

    @property
    def devices(self) -> bool:
        """Whether it asks for GPUs or ResourceClaims: devices it is given only on a node, chosen there."""
        return bool(self.pod.gpu.count or self.pod.resource_claims)


@dataclass(frozen=True, slots=True)
class Context(interface.CycleContext):
    """What a job's cycles are told from outside: what the plugins read (``interface.CycleContext``) and what only
    the core reads. The loop builds it once per job (``SchedulingLoop.cycle_context``); the session, a gang's
    what-ifs and the disruptive actions narrow it with ``dataclasses.replace``."""

    #: Node slots held for other jobs (a boolean mask: nominations, reservations, the room of move plans;
    #: ``scheduler.core.holds``): :meth:`Scheduler.filter` marks them unavailable in every cycle, whatever plugins
    #: the profile names. None: none held.
    reserved: npt.NDArray[np.bool_] | None = None
    #: The single pods nominated by preemption that the pod must count (``scheduler.core.holds``), placed on their
    #: nodes in a what-if while the pod is filtered, as kube-scheduler's addNominatedPods adds them (not while it is
    #: scored).
    nominated: tuple[NominatedPod, ...] = ()
    #: For a whole-gang attempt that rejoins running members of a segmented gang: its segments' layout, so each
    #: member goes back to its own segment's domain (``scheduler.core.gang.what_if_in_segments``).
    segments: segment_layout.Layout | None = None


#: A cycle told nothing from outside (a what-if, a test).
EMPTY = Context()


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a pod fits nowhere: how many nodes failed for each reason (first reason per node)."""

    nodes: int
    counts: tuple[tuple[str, int], ...] = ()
    #: The reason codes (``scheduler.kernels.layout``) nodes failed for, for the queueing hints.
    codes: tuple[int, ...] = ()
    #: Why no node ever can hold the pod as the cluster is, and what would change it; "" if it waits for room.
    never: str = ""

    def message(self, post_filter: str = "") -> str:
        """kube-scheduler's sentence (which tools and tests match on) with what its PostFilter adds (``post_filter``:
        ``preemption: ...``), then whether it waits or never fits."""
        parts = ", ".join(f"{n} {text}" for text, n in self.counts)
        said = f"0/{self.nodes} nodes are available: {parts}." if parts else f"0/{self.nodes} nodes are available."
        if post_filter:
            said = f"{said} {post_filter}"
        return f"{said} {self.never}" if self.never else said


def diagnose(reasons: np.ndarray, snapshot: Snapshot, pod: PodRequest, request: np.ndarray) -> Diagnosis:
    """Count the nodes per reason (a taint named per node, as kube-scheduler does), and say whether the pod never
    fits as the cluster is (``scheduler.core.capacity``)."""
    present = reasons[reasons != layout.ABSENT]
    codes, counts = np.unique(present[present != layout.FIT], return_counts=True)
    by_text: Counter[str] = Counter()
    for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
        reason = registry.REASONS.get(code)
        if reason is not None and reason.texts is not None:  # named per node (a taint)
            by_text.update(reason.texts(snapshot, pod, np.flatnonzero(reasons == code)))
        else:
            by_text[reason_texts.reason_text(code, snapshot.columns)] += count
    ordered = tuple(sorted(by_text.items(), key=lambda kv: (-kv[1], kv[0])))
    never = capacity.pod_never_fits(snapshot, pod, request, reasons)
    return Diagnosis(int(present.shape[0]), ordered, tuple(int(c) for c in codes.tolist()), never)


@dataclass(slots=True)
class Result:
    status: Status
    decision: Decision | None = None
    diagnosis: Diagnosis | None = None
    state: CycleState | None = field(default=None, repr=False)
    #: Per node slot, the first reason the filters refused it for (``FIT``: not refused); None when refused before
    #: any node was looked at. Preemption skips the nodes no eviction can change.
    reasons: np.ndarray | None = field(default=None, repr=False)


@dataclass(slots=True)
class Filtered:
    """What the filters made of a pod on a snapshot (:meth:`Scheduler.filter`)."""

    state: CycleState
    #: Not ok: the pod was refused before any node was looked at (a pre-filter, a profile without dra).
    status: Status
    #: Per node slot, the first reason it cannot take the pod (``scheduler.kernels.layout``), or ``FIT``; None when
    #: refused before any node was looked at.
    reasons: np.ndarray | None = None


class NoBinding:
    """A binder that binds nothing: for cycles whose decisions are only looked at (warm-up, ``explain``)."""

    def bind(self, decision: Decision) -> None:
        return None


class Scheduler:
    """Schedules pods one cycle at a time against a cache, with one profile, handing decisions to a binder."""

    def __init__(self, cache: Cache, framework: Framework, binder: interface.Binder) -> None:
        self.cache = cache
        self.framework = framework
        self.binder = binder
        self._rng = np.random.default_rng(framework.config.seed)
        self._random_ties = framework.config.tie_break == "random"
        #: Whether the profile allocates ResourceClaims; without it a pod with claims must not be bound (its
        #: containers would start without their devices).
        self._allocates_claims = any(p.name == "dra" for p in framework.reservers)

    @property
    def allocates_claims(self) -> bool:
        """Whether the profile allocates ResourceClaims (has the ``dra`` plugin)."""
        return self._allocates_claims

    def schedule(self, pod: PodRequest, context: Context = EMPTY) -> Result:
        """Run one cycle for ``pod``; on success the pod is assumed in the cache and handed to the binder."""
        snapshot = self.cache.snapshot()
        result = self.place(pod, snapshot, context)
        if result.decision is None or result.state is None:
            return result
        decision = result.decision
        self.cache.assume(pod, decision.node, decision.gpu_ids, decision.volumes, decision.claims)
        self.binder.bind(result.decision)
        return result

    def place(self, pod: PodRequest, snapshot: Snapshot, context: Context = EMPTY, *, explain: bool = True) -> Result:
        """Filter, score, pick and reserve on ``snapshot`` without touching the cache (what-ifs use this).

        ``context``: what the cycle is told from outside (the plugins read it as the cycle state's ``context``).
        ``explain``: a pod that fits nowhere gets the count of nodes per reason (a what-if that reads only whether it
        fits does without: a move plan's search places thousands of pods that do not).
        """
        filtered = self.filter(pod, snapshot, context)
        state, reasons = filtered.state, filtered.reasons
        if reasons is None:
            return Result(filtered.status, state=state)
        fw = self.framework
        feasible = (reasons == layout.FIT).nonzero()[0].astype(np.int64, copy=False)
        state.feasible = feasible
        if feasible.shape[0] == 0:
            if not explain:
                return Result(Status(Code.UNSCHEDULABLE, "no node fits", "filter"), state=state, reasons=reasons)
            diagnosis = diagnose(reasons, snapshot, pod, state.request)
            status = Status(Code.UNSCHEDULABLE, diagnosis.message(), "filter")
            return Result(status, diagnosis=diagnosis, state=state, reasons=reasons)
        total = np.zeros(feasible.shape[0])
        if fw.scorers:
            out = np.empty(feasible.shape[0])
            for scorer, weight, normalize in fw.scorers:
                if scorer.score(state, feasible, out) is False:
                    continue  # 0 on every node: nothing to add
                if normalize is not None:
                    normalize(state, out)
                total += weight * out
        best = total.max()
        ties = (total == best).nonzero()[0]
        if ties.shape[0] == 1:
            pick = int(ties[0])
        elif self._random_ties:
            pick = int(self._rng.choice(ties))
        else:
            # The first node by name (kube-scheduler's and the FGD paper's rule), not by slot: slots follow the
            # order nodes were seen in, which a restart changes.
            pick = int(ties[np.argmin(snapshot.name_rank()[feasible[ties]])])
        slot = int(feasible[pick])
        for i, reserver in enumerate(fw.reservers):
            status = reserver.reserve(state, slot)
            if not status.ok:
                for undo in reversed(fw.reservers[:i]):
                    undo.unreserve(state, slot)
                return Result(status, state=state)
        node = snapshot.names[slot]
        assert node is not None, "a feasible slot always holds a node"
        gpu_ids = tuple(state.data.get(interface.GPU_IDS, ()))
        volumes = tuple(state.data.get(interface.VOLUME_BINDINGS, ()))
        claims = tuple(state.data.get(interface.DEVICE_CLAIMS, ()))
        return Result(Status.success(), Decision(pod, node, gpu_ids, volumes, claims), state=state)

    def fits_on(self, pod: PodRequest, snapshot: Snapshot, slot: int, context: Context = EMPTY) -> bool:
        """Whether ``pod`` fits on node ``slot`` of ``snapshot``: the answer of :meth:`place` with every other node
        held (that it would place the pod there), found by the same filters and reservers on that node alone.

        kube-scheduler's SelectVictimsOnNode in cost: preemption asks this per candidate node and per victim put
        back, and a full cycle would filter and score the whole cluster each time. The filters still read the whole
        cluster where a node's verdict depends on it (inter-pod affinity, topology spread), but judge only this
        node; no score is computed (one node is its own best), and what the reservers record in a what-if (devices,
        volumes) is undone."""
        filtered = self.filter(pod, snapshot, context, only=slot)
        if filtered.reasons is None or filtered.reasons[slot] != layout.FIT:
            return False
        state = filtered.state
        state.feasible = np.array([slot], dtype=np.int64)
        token = snapshot.checkpoint()
        try:
            return all(reserver.reserve(state, slot).ok for reserver in self.framework.reservers)
        finally:
            snapshot.rollback(token)

    def add_nominated(self, nominated: NominatedPod, snapshot: Snapshot) -> None:
        """Place ``nominated`` on its node in ``snapshot``'s open what-if, as it will be placed when it binds: its
        requests, and for a pod with GPUs or ResourceClaims the devices its own cycle would choose there with its
        victims gone (kube-scheduler's addNominatedPods adds its requests to the node; GPUs and shares are given per
        device here, so a count on the node would not keep the devices it needs free). A victim still there keeps
        what it holds in the what-if too: its devices stay taken beside the nominated pod's, and the node's other
        resources are over-committed until it goes, as kube-scheduler counts them.

        A pod that no longer fits its node even with its victims gone (the node changed, a pod of higher priority
        nominated there first) still counts: its requests, and the devices with the most room left."""
        pod, slot = nominated.pod, nominated.slot
        if not nominated.devices:
            snapshot.place(Placement(slot, nominated.request, pod=pod))
            return
        chosen = self._devices_at_binding(nominated, snapshot)
        if chosen is None:
            a = snapshot.arrays
            free = a.gpu_free[slot, : int(a.gpu_count[slot])]
            most = np.argsort(-free, kind="stable")[: pod.gpu.count]
            snapshot.place(snapshot.placement(pod, slot, sorted(int(g) for g in most)))
            return
        gpu_ids, claims = chosen
        snapshot.place(snapshot.placement(pod, slot, gpu_ids))
        if claims:
            snapshot.pick_devices(claims)

    def _devices_at_binding(
        self, nominated: NominatedPod, snapshot: Snapshot
    ) -> tuple[tuple[int, ...], tuple[ClaimAllocation, ...]] | None:
        """The GPUs and claim allocations the nominated pod's cycle would choose on its node with its victims gone
        (None: it would not fit there), found by the filters and reservers on that node alone (:meth:`fits_on`) in
        a what-if that is undone."""
        pod, slot = nominated.pod, nominated.slot
        token = snapshot.checkpoint()
        try:
            for key in nominated.victims:
                entry = self.cache.pod(key)
                if entry is not None and entry.placement.slot == slot:
                    snapshot.unplace(entry.placement)
            filtered = self._filter(pod, snapshot, EMPTY, only=slot)
            if filtered.reasons is None or filtered.reasons[slot] != layout.FIT:
                return None
            state = filtered.state
            state.feasible = np.array([slot], dtype=np.int64)
            if not all(reserver.reserve(state, slot).ok for reserver in self.framework.reservers):
                return None
            return tuple(state.data.get(interface.GPU_IDS, ())), tuple(state.data.get(interface.DEVICE_CLAIMS, ()))
        finally:
            snapshot.rollback(token)

    def filter(
        self, pod: PodRequest, snapshot: Snapshot, context: Context = EMPTY, *, only: int | None = None
    ) -> Filtered:
        """The cycle's filtering, the one the cycle and ``gpusched explain`` both run: the profile's check for
        ResourceClaims, the pre-filters, the nodes held for other jobs, then every filter plugin; a node that passes
        and has pods nominated to it that ``context`` names (``Context.nominated``) passes only if it passes again with
        them placed there. ``only``: the one
        node slot to judge (:meth:`fits_on`); every other node is out of the question (``reasons.RESERVED``), which
        the filters skip as they skip any node already refused."""
        nominated = context.nominated
        if not nominated:
            return self._filter(pod, snapshot, context, only=only)
        slots = snapshot.arrays.slots
        counted = [p for p in nominated if p.slot < slots and p.pod.key != pod.key]
        if only is not None:
            counted = [p for p in counted if p.slot == only]
            if not counted:
                return self._filter(pod, snapshot, context, only=only)
            return self._with_nominated(pod, snapshot, context, counted, only)
        # As kube-scheduler filters a node with nominated pods twice, without and with them: only the nodes that
        # pass without them and hold some are filtered again (most nodes a preemptor waits for are full anyway).
        filtered = self._filter(pod, snapshot, context, only=None)
        if filtered.reasons is None:
            return filtered
        fit = filtered.reasons == layout.FIT
        counted = [p for p in counted if fit[p.slot]]
        if not counted:
            return filtered
        again = np.unique(np.array([p.slot for p in counted], dtype=np.int64))
        second = self._with_nominated(pod, snapshot, context, counted, again)
        if second.reasons is None:
            # A pre-filter refused it with them counted: they hold it.
            filtered.reasons[again] = framework_reasons.RESERVED.code
        else:
            filtered.reasons[again] = second.reasons[again]
        return filtered

    def _with_nominated(
        self,
        pod: PodRequest,
        snapshot: Snapshot,
        context: Context,
        nominated: list[NominatedPod],
        only: int | np.ndarray,
    ) -> Filtered:
        """:meth:`_filter` on the ``only`` node slots with ``nominated`` placed on theirs (a what-if, undone)."""
        token = snapshot.checkpoint()
        try:
            for nominated_pod in nominated:
                self.add_nominated(nominated_pod, snapshot)
            return self._filter(pod, snapshot, context, only=only)
        finally:
            snapshot.rollback(token)

    def _filter(
        self, pod: PodRequest, snapshot: Snapshot, context: Context, *, only: int | np.ndarray | None
    ) -> Filtered:
        state = CycleState(pod=pod, snapshot=snapshot, request=snapshot.request_vector(pod), context=context)
        if pod.resource_claims and not self._allocates_claims:
            message = (
                f"the profile {self.framework.config.name!r} has no dra plugin to allocate the pod's ResourceClaims"
            )
            return Filtered(state, Status(Code.UNRESOLVABLE, message, "dra"))
        for pre in self.framework.pre_filters:
            status = pre.pre_filter(state)
            if not status.ok:
                return Filtered(state, status)
        reasons = snapshot.arrays.base_reason.copy()
        if only is not None:
            kept = reasons[only]
            reasons[:] = framework_reasons.RESERVED.code
            reasons[only] = kept
        reserved = context.reserved
        if reserved is not None:
            # Nodes nominated for a preemptor or reserved for a starving job (scheduler.core.holds): part of the
            # core path, so a profile cannot leave them out.
            size = min(reserved.shape[0], reasons.shape[0])
            reasons[:size][reserved[:size] & (reasons[:size] == layout.FIT)] = framework_reasons.RESERVED.code
        for filter_plugin in self.framework.filters:
            filter_plugin.filter(state, reasons)
        if reserved is not None:
            # Again after the filters: node_rules gives a pod that tolerates cordons the cordoned nodes back, held
            # ones too.
            reasons[:size][reserved[:size] & (reasons[:size] == layout.FIT)] = framework_reasons.RESERVED.code
        return Filtered(state, Status.success(), reasons)

    def wakes(self, diagnosis: Diagnosis | None) -> frozenset[interface.ClusterEvent] | None:
        """The cluster events that may let a pod that failed with ``diagnosis`` fit (None: any event may): the
        union of what the filter plugins declare for the reasons its nodes failed for (``FilterPlugin.wakes``),
        and the core's own for the reasons it sets."""
        if diagnosis is None:
            return None
        events: set[interface.ClusterEvent] = set()
        for code in diagnosis.codes:
            own = framework_reasons.wakes(framework_reasons.CORE, code)
            if own is not None:
                events |= own
                continue
            declared = [w for f in self.framework.filters if (w := f.wakes(code)) is not None]
            if not declared:
                return None  # held for another job (core.holds), or a code nobody declared: anything may help
            for wakes in declared:
                events |= wakes
        return frozenset(events)

    def bound(self, key: str) -> None:
        """The binder reports success."""
        self.cache.confirm(key)

    def bind_failed(self, key: str) -> None:
        """The binder reports failure: release the pod's reservation."""
        self.cache.forget(key)
