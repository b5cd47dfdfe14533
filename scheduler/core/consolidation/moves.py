"""Consolidation's state: which running pods may move, the plans being carried out, and what they hold.

A plan (``scheduler.core.consolidation.plan``) is carried out as one statement (:meth:`Moves.start` records its steps on
the session's ``scheduler.core.statement.Statement``): its targets are held first (the job's nodes for the job, each
moved pod's target for the pod that replaces it), then the moved pods are handed to the
:class:`~scheduler.core.ports.Mover` (the Eviction API in a cluster). A moved pod's controller
recreates it: the first new pending pod of the same controller and the same GPUs claims the move
(:meth:`Moves.claim`) and may go only to that move's target; the job may go only to its own nodes; every other job
leaves all of them alone. A plan ends when the job and every replacement are placed, and is abandoned (everything
it holds released, a reason on the job) when an eviction is refused, the job leaves, or a step of it is not done
within ``stepTimeoutSeconds``. What a plan holds is one hold of kind ``MOVE_PLAN`` in the holds registry
(``scheduler.core.holds``, which every cycle reads), kept up to date as the plan goes, released when it ends, and
held until the deadline of the plan's step under way: the registry drops it then, and the plan is abandoned.

A plan whose evictions a PodDisruptionBudget allows one at a time only (``move_plan.Pace.IN_STEPS``: it allows
fewer of its pods at once than the plan moves) is carried out in steps, as the Eviction API allows it: every target
held from the start, one eviction per step in the plan's order, and the next step once the last moved pod's
replacement is bound on its target and Running (the budget counts healthy pods), the budgets that cover it have
been seen again since that eviction (the API server counts an eviction in the budget's status at once; a status
read before it would allow too much), and they allow the next pod's eviction. A step not done within the bound
abandons the plan: the pods not evicted stay where they are. A plan within the budgets at once is one step: every
eviction at once, and its end within the bound.

Plans live in the leader's memory: a new leader starts with none, so a step the old leader had not taken is never
taken (no pod is evicted twice, nor past its budget on the word of a dead leader); the evicted pods' replacements
are placed as any pod, and the job searches again from what it finds.

Which pods may move (:meth:`Moves.movable_on`): pods gpusched placed (never those another scheduler bound,
``scheduler.core.tenancy``), that a controller recreates (an ``ownerReference`` with
``controller: true``), not annotated ``gpusched.io/consolidation: never``, whose Queue's
``spec.consolidation.moves`` allows them (``ExceptTraining`` by default: not a gang's members, not a batch Job's
pods), of a priority not above the job's, not moved (or refused an eviction) within the cooldown, that have run
their queue's ``spec.consolidation.moveMinRuntimeSeconds`` (``scheduler.core.min_runtime``), bound (not
assumed), not leaving already, and not part of a plan. A gang's members never move: a gang moves whole or not at
all, and whole-gang moves are not carried out yet.

Where background defragmentation's moved pods may not go (:meth:`Moves.barred_targets`): a node a moved pod left
less than the cooldown ago (since its move started, or its replacement was placed), so that no background plan
fills again the room an earlier plan made while the moved pod itself may not move. A pending job's plan may use
that room: the job it is for needs it now (barring it there was measured: longer waits for the large pods).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from scheduler.api.objects import pdb as api_pdb
from scheduler.api.objects.pod import ANNOTATION_CONSOLIDATION, PodRequest
from scheduler.cache.state import PodEntry
from scheduler.core import memo, min_runtime
from scheduler.core.actions import Setting, State
from scheduler.core.consolidation import no_plans as move_memo
from scheduler.core.consolidation import plan as move_plan
from scheduler.core.consolidation.plan import Pace, Plan
from scheduler.core.holds import Hold, Kind, sized
from scheduler.core.ports import Mover
from scheduler.core.statement import Statement

#: The controller kind whose pods are training (run to completion: a move loses their progress).
TRAINING_KINDS = frozenset({"Job"})


#: Per-job "no plan" answers kept at most (the oldest goes first).
_NO_PLANS_KEPT = 65536


class NoPlan(NamedTuple):
    """A consolidation search found no plan for a job."""

    #: The cluster's generation it was found at.
    version: int
    why: str
    #: When the earliest cooldown ends (a pod may move again): it holds until then at the latest.
    until: float


def _same_objects(these: Sequence[object], those: Sequence[object]) -> bool:
    """Whether two sequences hold the same objects (not equal ones), in the same order."""
    return len(these) == len(those) and all(a is b for a, b in zip(these, those, strict=True))


def _no_plan_holds(answer: NoPlan, present: tuple[int, float]) -> bool:
    version, now = present
    return answer.version == version and now < answer.until


@dataclass(slots=True)
class InFlight:
    """A plan being carried out for job ``key``."""

    key: str
    obj: str
    plan: Plan
    started: float
    #: The node slots the job goes to.
    job_slots: np.ndarray
    #: Per move, its target slot.
    targets: list[int]
    #: Moves whose replacement has not been placed yet (indices into ``plan.moves``).
    waiting: set[int] = field(default_factory=set)
    #: Replacement pod key -> the move it claimed.
    claimed: dict[str, int] = field(default_factory=dict)
    #: Whether the job itself is placed.
    job_placed: bool = False
    #: No job to place (background defragmentation): the job's nodes stay held until every move is done.
    background: bool = False
    #: How many moves have been evicted (the first of ``plan.moves``: all at once, or one per step).
    evicted: int = 0
    #: When the step under way began (its eviction; the plan's start for the first).
    step_started: float = 0.0
    #: Placed replacement pod key -> its move; the moves whose replacement was seen Running on its target.
    replaced: dict[str, int] = field(default_factory=dict)
    running: set[int] = field(default_factory=set)
    #: Budget key -> how many times it had been seen when the last step's eviction was asked (the next step waits
    #: for a newer status of each).
    seen_at_eviction: dict[str, int] = field(default_factory=dict)

    def holds(self, slots: int) -> np.ndarray:
        held = self.background or not self.job_placed
        mask = sized(self.job_slots, slots) if held else np.zeros(slots, dtype=bool)
        for i in self.waiting:
            mask[self.targets[i]] = True
        return mask


class Moves(State):
    """The consolidate action's state (``scheduler.core.actions.State``: the loop tells it what happened through its
    hooks)."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.scheduler = setting.scheduler
        self.jobs = setting.jobs
        self.tenancy = setting.tenancy
        self.clock = setting.clock
        self.events = setting.events
        self.limits = setting.scheduler.framework.config.consolidation
        #: The cluster's PodDisruptionBudgets (the loop's: one copy).
        self.budgets: Mapping[str, api_pdb.DisruptionBudget] = setting.budgets
        #: Where the plans' holds are kept (the one registry every cycle reads).
        self.holds = setting.holds
        self.holds.when_expired(Kind.MOVE_PLAN, self._expired)
        #: Job key -> its plan being carried out.
        self.plans: dict[str, InFlight] = {}
        #: Moved pod key (the pod that leaves) -> the job key of its plan.
        self.leaving: dict[str, str] = {}
        #: Pod key -> when it was placed by a move, or its eviction was refused (not moved again within the cooldown).
        self.cooled: dict[str, float] = {}
        #: Node name -> when a moved pod last left it (its move started, or its replacement was placed): no
        #: background plan puts a pod there within the cooldown (:meth:`barred_targets`).
        self.vacated: dict[str, float] = {}
        #: Job key -> the last search's "no plan" for it: it holds while the cluster's generation is the one it was
        #: found at, until the earliest cooldown ends at the latest (recalled with (generation, now)).
        self.no_plan: memo.Memo[str, NoPlan, tuple[int, float]] = memo.Memo(_no_plan_holds, limit=_NO_PLANS_KEPT)
        #: "No plan" answers by job shape, until something that could change them happens.
        self.memo = move_memo.memo()
        #: The nodes' pods as those answers read them (copies shared between answers).
        self.memo_pods = move_memo.Pods()
        #: What the searches keep between them (the ranking's reads of the nodes, per job shape: ``move_plan.Memo``).
        self.search_memo = move_plan.Memo()
        #: Job key -> (its members when last asked, what of each the memo's answers depend on): made once per job.
        self.member_kinds: dict[str, tuple[tuple[PodRequest, ...], list[Hashable | None]]] = {}
        #: Bumped whenever what may move or what plans hold changes (the memo's answers are then stale).
        self.epoch = 0
        #: Searches run, by verdict (``move_plan.PLAN``, ``IMPOSSIBLE``, ``OUT_OF_REACH``), and each job's last one.
        self.verdicts: dict[str, int] = {}
        self.last_verdict: dict[str, str] = {}
        #: (node slot, priority) -> (epoch, valid until, the node's pods then (``Cache.pods_version``), the movable
        #: ones among them).
        self._movable: dict[tuple[int, int], tuple[int, float, int, list[PodEntry]]] = {}
        #: When pods found too young to move (their queue's minimum run time) may move: "no plan" answers end then.
        self.young_until: set[float] = set()
        #: Budget key -> how many times a status of it was seen (a stepped plan's next step waits for a new one).
        self.budget_seen: dict[str, int] = {}
        #: Counters for metrics: plans started and abandoned, pods moved, whole GPUs those pods held.
        self.started = 0
        self.abandoned = 0
        self.moved = 0
        self.gpus_moved = 0

    @property
    def mover(self) -> Mover | None:
        """Who evicts moved pods (the loop's; None: no consolidation)."""
        return self.setting.mover

    # --- the loop's hooks (``scheduler.core.actions.State``) ----------------------------------------------------

    def pod_pending(self, pod: PodRequest) -> None:
        self.claim(pod)  # a moved pod's replacement goes to the target held for it

    def pod_placed(self, pod: PodRequest) -> None:
        self.running(pod)  # a moved pod's replacement Running: its plan may take its next step

    def job_placed(self, key: str) -> None:
        self.placed(key)

    def job_gone(self, key: str) -> None:
        self.gone(key)

    def queues_changed(self) -> set[str]:
        return self.forget_answers()  # a Queue's spec.consolidation.moves may differ

    def budget_changed(self, key: str) -> set[str]:
        waiting = self.forget_answers()
        self.budget_read(key)  # a plan in steps may take its next one
        return waiting

    def move_refused(self, pod_key: str, message: str) -> None:
        self.refused(pod_key, message)

    def expire(self) -> bool:
        return bool(self.plans and self.abandon_late())

    def leadership_lost(self) -> None:
        """The plans being carried out are dropped, so that no later step is taken on this replica's word (the pods
        not evicted stay; whoever leads next searches from what it finds)."""
        for key in list(self.plans):
            self.abandon(key, "this replica no longer leads")

    # --- the rules -----------------------------------------------------------------------------------------------

    def movable_on(self, slot: int, priority: int) -> list[PodEntry]:
        """The running pods of node ``slot`` that may move for a job of ``priority`` (see the module notes). Kept
        per node and priority while the node's pods are the same ones (bound or assumed alike), consolidation's
        state has not moved (:attr:`epoch`) and no cooldown has ended: a search reads every node. Read again and found
        the same, it is the same list (the searches keep what they found per list: ``room.Reads``)."""
        now, cache = self.clock(), self.scheduler.cache
        seen = cache.pods_version(slot)
        kept = self._movable.get((slot, priority))
        if kept is not None and kept[0] == self.epoch and now < kept[1] and kept[2] == seen:
            return kept[3]
        on = cache.pods_on(slot)
        out = []
        valid = self.cooldown_ends()
        for entry in on.values():
            pod = entry.pod
            if self.why_not(pod, priority, now) or entry.assumed:
                until = self._protected_until(pod)
                if until > now:
                    valid = min(valid, until)  # it may move once it has run its queue's minimum
                    self.young_until.add(until)
                continue
            out.append(entry)
        if kept is not None and _same_objects(kept[3], out):
            out = kept[3]  # the same pods: the same list, so that what searches kept of the node holds
        self._movable[(slot, priority)] = (self.epoch, valid, seen, out)
        return out

    def movable_known(self, slots: Sequence[int], priority: int) -> list[list[PodEntry] | None]:
        """Per node slot of ``slots``, what :meth:`movable_on` gives for ``priority`` if what it kept of the node
        still holds (the same list object), None where it would read the node again: a search asks this of every node
        it ranks at once, and reads again only the others."""
        now, epoch, version, movable = self.clock(), self.epoch, self.scheduler.cache.pods_version, self._movable
        out: list[list[PodEntry] | None] = []
        for slot in slots:
            kept = movable.get((slot, priority))
            held = kept is not None and kept[0] == epoch and now < kept[1] and kept[2] == version(slot)
            out.append(kept[3] if held and kept is not None else None)
        return out

    def kinds_of(self, key: str, members: Sequence[PodRequest]) -> list[Hashable | None]:
        """``no_plans.kinds_of(members)`` for job ``key``, made again only when its members are other objects."""
        kept = self.member_kinds.get(key)
        if kept is not None and _same_objects(kept[0], members):
            return kept[1]
        kinds = move_memo.kinds_of(members)
        self.member_kinds[key] = (tuple(members), kinds)
        return kinds

    def why_not(self, pod: PodRequest, priority: int, now: float) -> str:
        """Why ``pod`` may not move for a job of ``priority``; "" if it may."""
        if self.tenancy.is_outside(pod.key):
            return f"another scheduler ({pod.scheduler_name}) placed it: gpusched never evicts its pods"
        if not pod.owner:
            return "no controller recreates it"
        if pod.annotations.get(ANNOTATION_CONSOLIDATION, "allow") != "allow":
            return f"annotated {ANNOTATION_CONSOLIDATION}: never"
        if pod.deleting or pod.key in self.leaving:
            return "it is leaving already"
        if pod.priority > priority:
            return "its priority is higher than the job's"
        job = self.jobs.of_pod(pod.key)
        if job is not None and job.group is not None:
            return "it is a gang's member (a gang moves whole or not at all)"
        leaf = job.queue if job is not None else self.jobs.queue_of(pod)
        moves = self.tenancy.tree.spec(leaf).moves if leaf in self.tenancy.tree else "Never"
        if moves == "Never":
            return f"its queue {leaf!r} does not allow moves"
        if moves == "ExceptTraining" and pod.owner_kind in TRAINING_KINDS:
            return f"it is training ({pod.owner_kind}) and its queue {leaf!r} moves all but training"
        since = self.cooled.get(pod.key)
        if since is not None and now - since < self.limits.cooldown_s:
            return f"moved or refused {now - since:.0f}s ago (cooldown {self.limits.cooldown_s:g}s)"
        until = self._protected_until(pod)
        if now < until:
            return min_runtime.why_protected(self.tenancy, leaf, "move", until)
        return ""

    def _protected_until(self, pod: PodRequest) -> float:
        """Until when ``pod`` may not move for its queue's minimum run time (``core.min_runtime``); -inf: it may."""
        if not min_runtime.in_force(self.tenancy, "move"):
            return float("-inf")
        job = self.jobs.of_pod(pod.key)
        leaf = job.queue if job is not None else self.jobs.queue_of(pod)
        return min_runtime.protected_until(self.tenancy, leaf, "move", [pod], job.started if job is not None else None)

    def pace(self, pods: Sequence[PodRequest]) -> Pace | None:
        """How evicting ``pods`` may go within the PodDisruptionBudgets, read as the Eviction API that will enforce
        them reads them (``api_pdb.Reading.EVICTION``: an empty selector selects every pod of its namespace): at
        once if no budget covers more of them than it allows; one at a time if some budget does, but each allows
        one; None if some eviction would be refused even alone (a budget that allows none, or a pod under two)."""
        eviction = api_pdb.Reading.EVICTION
        for pod in pods:
            if (
                sum(1 for b in self.budgets.values() if b.covers(pod.namespace, pod.name, pod.labels, reading=eviction))
                > 1
            ):
                return None  # the Eviction API refuses a pod under two budgets (it cannot weigh them together)
        pace = Pace.AT_ONCE
        for budget in self.budgets.values():
            covered = sum(1 for p in pods if budget.covers(p.namespace, p.name, p.labels, reading=eviction))
            if covered and budget.allowed < 1:
                return None
            if covered > budget.allowed:
                pace = Pace.IN_STEPS
        return pace

    def _covering(self, pod: PodRequest) -> list[str]:
        """The keys of the budgets that evicting ``pod`` costs."""
        eviction = api_pdb.Reading.EVICTION
        return [
            key for key, b in self.budgets.items() if b.covers(pod.namespace, pod.name, pod.labels, reading=eviction)
        ]

    def cooldown_ends(self) -> float:
        """When the earliest cooldown still running ends (a pod may move again then, or a background plan put pods
        on a node pods left), or a pod found too young to move has run its queue's minimum; infinity if none."""
        now = self.clock()
        ends = [
            since + self.limits.cooldown_s
            for since in (*self.cooled.values(), *self.vacated.values())
            if now - since < self.limits.cooldown_s
        ]
        self.young_until = {until for until in self.young_until if until > now}
        return min([*ends, *self.young_until], default=float("inf"))

    def barred_targets(self) -> np.ndarray | None:
        """The node slots background defragmentation puts no moved pod on: those a moved pod left less than the
        cooldown ago (a pod moved off a node, for a job or to empty it, is not followed by another pod moved onto it
        before the moved pod itself may move again). None if there are none."""
        now, cache = self.clock(), self.scheduler.cache
        for node, since in list(self.vacated.items()):
            if now - since >= self.limits.cooldown_s:
                del self.vacated[node]
        slots = [cache.slot_of(node) for node in self.vacated]
        if not any(slot is not None for slot in slots):
            return None
        barred = np.zeros(cache.arrays.slots, dtype=bool)
        barred[[slot for slot in slots if slot is not None]] = True
        return barred

    def forget_answers(self) -> set[str]:
        """Forget every "no plan" and the pods found movable (a PodDisruptionBudget or a Queue changed); the jobs
        that had a "no plan"."""
        waiting = set(self.no_plan)
        self.no_plan.clear()
        self.memo.clear()
        self.epoch += 1
        return waiting

    # --- carrying a plan out -------------------------------------------------------------------------------------

    def in_flight(self, key: str) -> bool:
        """Whether a plan is being carried out for job ``key`` (abandoned first if a step of it timed out)."""
        self.abandon_late()
        return key in self.plans

    def abandon_late(self) -> list[str]:
        """Abandon every plan whose step under way was not done within ``stepTimeoutSeconds`` (a replacement that
        never came or never ran, a budget that never allowed the next eviction, a background plan no job asks
        about): the registry drops their holds (each held until its step's deadline) and what they held goes back to
        everyone. The jobs whose plans were abandoned."""
        return [hold.job for hold in self.holds.expire() if hold.kind is Kind.MOVE_PLAN]

    def _expired(self, hold: Hold) -> None:
        """The registry dropped ``hold``, a plan's whose step under way is late: the plan is abandoned."""
        plan = self.plans.get(hold.job)
        if plan is not None:
            self.abandon(hold.job, self._late(plan, self.limits.step_timeout_s))

    def _hold(self, plan: InFlight) -> None:
        """Hold (again) what ``plan`` holds now, until its step under way is due: the job's nodes until it is placed
        and the targets still waiting for their replacements, kept off every other job; its job confined to its
        nodes, each replacement that claimed a move to that move's target."""
        slots = self.scheduler.cache.arrays.slots
        only = {plan.key: plan.job_slots}
        for pod_key, i in plan.claimed.items():
            target = np.zeros(slots, dtype=bool)
            target[plan.targets[i]] = True
            only[pod_key] = target
        self.holds.hold(
            kind=Kind.MOVE_PLAN,
            job=plan.key,
            slots=plan.holds(slots),
            until=plan.step_started + self.limits.step_timeout_s,
            priority=max((d.pod.priority for d in plan.plan.job), default=0),
            made=plan.started,
            only=only,
        )

    def _late(self, plan: InFlight, bound: float) -> str:
        """Why ``plan``'s step under way is late (it was given ``bound`` seconds)."""
        moves = plan.plan.moves
        if plan.evicted < len(moves):
            last = plan.evicted - 1
            step = f"step {plan.evicted + 1} of {len(moves)} did not come within {bound:g}s"
            if last not in plan.running:
                return f"{step}: the replacement of {moves[last].pod.key} is not Running on {moves[last].target}"
            pod = moves[plan.evicted].pod
            unseen = sorted(self._unseen(plan))
            if unseen:
                return f"{step}: no status of PodDisruptionBudget {', '.join(unseen)} seen since the last eviction"
            over = [k for k in self._covering(pod) if self.budgets[k].allowed < 1]
            return f"{step}: PodDisruptionBudget {', '.join(over)} allows no eviction of {pod.key}"
        return f"the plan did not end within {bound:g}s of its last eviction"

    def _unseen(self, plan: InFlight) -> set[str]:
        """The budgets whose status has not been seen again since ``plan``'s last eviction."""
        return {k for k, n in plan.seen_at_eviction.items() if self.budget_seen.get(k, 0) <= n}

    def start(self, key: str, obj: str, plan: Plan, statement: Statement, *, placed: bool = False) -> None:
        """Record on ``statement`` how ``plan`` is carried out for job ``key`` (``obj`` in Events): every target held,
        then the moved pods evicted, all of them or (a plan in steps) the first. ``placed``: there is no job to place
        (background defragmentation: the plan's nodes are held until the moves are done)."""
        assert self.mover is not None
        cache = self.scheduler.cache
        slots = cache.arrays.slots
        job_slots = np.zeros(slots, dtype=bool)
        for decision in plan.job:
            slot = cache.slot_of(decision.node)
            if slot is not None:
                job_slots[slot] = True
        targets = [cache.slot_of(m.target) or 0 for m in plan.moves]
        now = self.clock()
        flight = InFlight(
            key, obj, plan, now, job_slots, targets, set(range(len(plan.moves))), background=placed, step_started=now
        )
        statement.hold(lambda: self._begin(flight))
        statement.tell(
            lambda: self.events.emit(obj=obj, kind="Normal", reason="Consolidating", message=plan.describe())
        )
        count = len(plan.moves) if plan.pace is Pace.AT_ONCE else 1
        statement.evict(lambda: self._evict(flight, count))

    def _begin(self, flight: InFlight) -> None:
        """``flight`` is carried out from now on: its targets held in the registry (:meth:`_hold`), its moved pods
        part of it."""
        self.epoch += 1
        key = flight.key
        self.plans[key] = flight
        self.no_plan.forget(key)
        for move in flight.plan.moves:
            self.leaving[move.pod.key] = key  # part of a plan from the start, evicted now or at its step
        self._hold(flight)
        self.started += 1

    def _evict(self, plan: InFlight, count: int) -> None:
        """Evict the next ``count`` moves of ``plan``: a step begins."""
        assert self.mover is not None
        moves = plan.plan.moves[plan.evicted : plan.evicted + count]
        plan.evicted += len(moves)
        plan.step_started = self.clock()
        plan.seen_at_eviction = {k: self.budget_seen.get(k, 0) for m in moves for k in self._covering(m.pod)}
        for move in moves:
            self.vacated[move.source] = plan.step_started
            self.events.emit(
                obj=f"pod {move.pod.key}",
                kind="Normal",
                reason="Moved",
                message=f"moved from {move.source} to {move.target} to make room for {plan.obj} (consolidation)",
            )
        self.moved += len(moves)
        self.gpus_moved += sum(m.pod.gpu.count for m in moves if m.pod.gpu.whole)
        self._hold(plan)
        self.mover.move([m.pod for m in moves], f"consolidation: making room for {plan.obj}")

    def advance(self) -> None:
        """Take the next step of every plan in steps whose last moved pod's replacement runs on its target and
        whose budgets allow the next eviction (seen again since the last one)."""
        for plan in list(self.plans.values()):
            moves = plan.plan.moves
            if plan.evicted >= len(moves) or plan.evicted - 1 not in plan.running or self._unseen(plan):
                continue
            if self.pace([moves[plan.evicted].pod]) is not Pace.AT_ONCE:
                continue
            self.epoch += 1
            self._evict(plan, 1)

    def budget_read(self, key: str) -> None:
        """A status of budget ``key`` was seen (or it went): a plan in steps may take its next one."""
        self.budget_seen[key] = self.budget_seen.get(key, 0) + 1
        self.advance()

    def running(self, pod: PodRequest) -> None:
        """A bound pod was seen (its phase may have changed): a replacement Running on its target lets its plan take
        the next step, when the budgets allow it."""
        if pod.phase != "Running":
            return
        for plan in self.plans.values():
            i = plan.replaced.get(pod.key)
            if i is not None and i not in plan.running and pod.node_name == plan.plan.moves[i].target:
                plan.running.add(i)
                self.advance()
                return

    def claim(self, pod: PodRequest) -> None:
        """A new pending pod: if a moved pod's controller made it, it takes that move's target."""
        if not pod.owner or not self.plans:
            return
        for plan in self.plans.values():
            if pod.key in plan.claimed:
                return
            for i in sorted(plan.waiting - set(plan.claimed.values())):
                if i >= plan.evicted:
                    break  # a move whose step has not come: its pod still runs
                moved = plan.plan.moves[i].pod
                if moved.owner == pod.owner and moved.gpu == pod.gpu:
                    plan.claimed[pod.key] = i
                    self._hold(plan)
                    return

    def replacing(self, key: str) -> bool:
        """Whether pod ``key`` replaces a moved pod (it waits for its target; it makes no room of its own)."""
        return any(key in plan.claimed for plan in self.plans.values())

    def placed(self, key: str) -> None:
        """Queue item ``key`` was placed: a plan's job, or a replacement, is done; a plan all done ends."""
        now = self.clock()
        for job_key, plan in list(self.plans.items()):
            if key == job_key:
                plan.job_placed = True
            elif key in plan.claimed:
                i = plan.claimed.pop(key)
                plan.waiting.discard(i)
                plan.replaced[key] = i
                self.cooled[key] = now
                self.vacated[plan.plan.moves[i].source] = now  # the moved pod's cooldown starts now
            else:
                continue
            self.epoch += 1
            if (plan.job_placed or plan.background) and not plan.waiting and plan.evicted == len(plan.plan.moves):
                self._end(job_key)
            else:
                self._hold(plan)
            return

    def gone(self, key: str) -> None:
        """Pod (or job) ``key`` left: a moved pod is on its way; a job that leaves abandons its plan."""
        if key in self.leaving or key in self.cooled:
            self.epoch += 1
        self.leaving.pop(key, None)
        self.cooled.pop(key, None)
        self.last_verdict.pop(key, None)
        self.member_kinds.pop(key, None)
        if key in self.plans:
            self.abandon(key, "the job left")
            return
        for plan in self.plans.values():
            if plan.claimed.pop(key, None) is not None:
                self.epoch += 1
                self._hold(plan)

    def refused(self, pod_key: str, message: str) -> str | None:
        """The eviction of moved pod ``pod_key`` was refused: its plan is abandoned; the job's key, if any."""
        self.epoch += 1
        key = self.leaving.pop(pod_key, None)
        self.cooled[pod_key] = self.clock()
        if key is None or key not in self.plans:
            return None
        why = f"the eviction of {pod_key} was refused: {message}"
        self.abandon(key, why)
        # Not searched again until the cluster changes: the next plan would meet the same refusal.
        a = self.scheduler.cache.arrays
        self.no_plan.keep(key, NoPlan(memo.generation(a), why, float("inf")))
        return key

    def abandon(self, key: str, why: str) -> None:
        """Release everything job ``key``'s plan holds; say why on the job."""
        plan = self.plans.pop(key, None)
        if plan is None:
            return
        self.epoch += 1
        self.abandoned += 1
        self.holds.release(key, kind=Kind.MOVE_PLAN)
        for move in plan.plan.moves:
            if self.leaving.get(move.pod.key) == key:
                del self.leaving[move.pod.key]
        self.events.emit(
            obj=plan.obj, kind="Warning", reason="ConsolidationAbandoned", message=f"{why}; what it held is released"
        )

    def _end(self, key: str) -> None:
        self.epoch += 1
        plan = self.plans.pop(key)
        self.holds.release(key, kind=Kind.MOVE_PLAN)
        for move in plan.plan.moves:
            self.leaving.pop(move.pod.key, None)

    # --- what explain reads -------------------------------------------------------------------------------------

    def why(self, key: str) -> str:
        """The plan being carried out for job ``key``, or why the last search found none ("" if none ran)."""
        plan = self.plans.get(key)
        if plan is not None:
            return f"moving pods for it: {plan.plan.describe()}"
        last = self.no_plan.last(key)
        return last.why if last is not None else ""
