"""The consolidate action: a job that fits nowhere gets room by moving running pods, within the rules."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import pdb as api_pdb
from scheduler.api.objects import pod as api_pod
from scheduler.core.consolidation import plan as move_plan
from scheduler.core.consolidation import room as move_room
from scheduler.core.consolidation.defrag import Defragmenter
from scheduler.core.consolidation.moves import Moves, NoPlan
from scheduler.core.cycle import EMPTY
from scheduler.core.loop import ClusterEvent, SchedulingLoop
from scheduler.framework import profile
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

ACTIONS = ["allocate", "consolidate", "reclaim", "preempt"]


class Mover:
    def __init__(self) -> None:
        self.pods: list[api_pod.PodRequest] = []

    def move(self, pods: list[api_pod.PodRequest], reason: str) -> None:
        self.pods.extend(pods)


class World:
    """Three nodes of 8 GPUs at 7, 6 and 7 used by 1-GPU pods of one controller each node (d0, d1, d2)."""

    def __init__(
        self,
        used: tuple[int, ...] = (7, 6, 7),
        queues: list[QueueSpec] | None = None,
        consolidation: dict[str, int] | None = None,
    ) -> None:
        config = profile.parse(
            {"plugins": ["fit", "gpu", "fgd"], "actions": ACTIONS, "consolidation": consolidation or {}}
        )
        self.cluster = Cluster([objects.node(f"n{i}", cpu="64", gpus=8) for i in range(len(used))], config=config)
        self.clock, self.events, self.mover = Clock(), Events(), Mover()
        self.loop = SchedulingLoop(
            self.cluster.scheduler, SchedulingQueue(clock=self.clock), clock=self.clock, events=self.events
        )
        self.loop.mover = self.mover
        if queues:
            self.loop.queues_changed(queues)
        self.made = 0
        for i, count in enumerate(used):
            for j in range(count):
                self.bound(self.pod(f"d{i}-{j}", owner=f"d{i}"), f"n{i}")

    @property
    def moves(self) -> Moves:
        moves = self.loop.action_state(Moves)
        assert moves is not None
        return moves

    def pod(self, name: str, *, gpus: int = 1, owner: str = "", **kw: object) -> api_pod.PodRequest:
        pod = api_pod.parse_pod(objects.pod(name, gpus=gpus, **kw))  # type: ignore[arg-type]
        return dataclasses.replace(pod, owner=owner, owner_kind="ReplicaSet" if owner else "")

    def bound(self, pod: api_pod.PodRequest, node: str) -> None:
        placed = dataclasses.replace(pod, node_name=node, phase="Running")
        self.cluster.cache.upsert_pod(placed)
        self.loop.pod_placed(placed)

    def step(self) -> None:
        """Cycles until idle; evictions happen, controllers make new pods; bindings confirmed; again until still."""
        for _ in range(10):
            self.clock.now += 5.0  # past any backoff
            self.loop.run_until_idle()
            for decision in self.cluster.binder.decisions:
                self.bound(decision.pod, decision.node)
            self.cluster.binder.decisions.clear()
            if not self.mover.pods:
                continue
            moved, self.mover.pods = self.mover.pods, []
            for pod in moved:
                self.cluster.cache.remove_pod(pod.key)
                self.loop.pod_gone(pod.key)
            for pod in moved:
                self.made += 1
                self.loop.pod_pending(dataclasses.replace(pod, name=f"new{self.made}", node_name="", phase="Pending"))
            self.loop.cluster_event(ClusterEvent.POD_DELETED)

    def used(self) -> list[int]:
        out = [0, 0, 0]
        for entry in self.cluster.cache.pods():
            out[entry.placement.slot] += entry.pod.gpu.count
        return out

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events.seen]


def test_a_four_gpu_pod_fits_only_by_moving_two_pods_and_every_moved_pod_runs_again() -> None:
    world = World()
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    node = world.cluster.cache.pod("default/big")
    assert node is not None, world.events.seen
    assert sorted(world.used()) == [8, 8, 8]
    assert world.made == 2  # n1 had 2 free: two pods moved off it
    assert len(list(world.cluster.cache.pods())) == 20 + 1
    assert world.reasons().count("Moved") == 2 and "Consolidating" in world.reasons()
    assert world.moves.plans == {} and world.moves.moved == 2


def test_nothing_moves_without_the_action_in_the_profile() -> None:
    world = World()
    world.loop.mover = None
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.cluster.cache.pod("default/big") is None and world.made == 0


def test_pods_annotated_never_pods_without_controller_and_no_move_queues_stay() -> None:
    world = World(used=(0, 0, 0), queues=[QueueSpec(name="fixed", moves="Never")])
    for j in range(7):
        world.bound(world.pod(f"a{j}", owner="a", annotations={"gpusched.io/consolidation": "never"}), "n0")
        world.bound(world.pod(f"c{j}", owner="c", labels={"gpusched.io/queue": "fixed"}), "n2")
    for j in range(6):
        world.bound(world.pod(f"b{j}"), "n1")  # no controller
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.cluster.cache.pod("default/big") is None and world.made == 0
    assert any(r == "NoMovePlan" for r in world.reasons())


def _no_plan_for_a_budget(world: World) -> None:
    """A 4-GPU pod comes: nothing moves, and its NoMovePlan names a PodDisruptionBudget."""
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.made == 0 and world.cluster.cache.pod("default/big") is None
    told = [m for _, r, m in world.events.seen if r == "NoMovePlan"]
    assert told and "PodDisruptionBudget" in told[0]


def test_a_disruption_budget_bounds_the_plan() -> None:
    world = World(used=(0, 0, 0))
    for i, count in enumerate((7, 6, 7)):
        for j in range(count):
            world.bound(world.pod(f"d{i}-{j}", owner=f"d{i}", labels={"app": f"d{i}"}), f"n{i}")
    for i in range(3):
        selector = {"matchLabels": {"app": f"d{i}"}}
        raw = {"metadata": {"namespace": "default", "name": f"d{i}"}, "spec": {"selector": selector}}
        world.loop.budget_upsert(api_pdb.parse_pdb({**raw, "status": {"disruptionsAllowed": int(i != 1)}}))
    # d1's budget allows no eviction: room on n1 needs two of d1's pods, and two pods off n0 or n2 (one at a time, as
    # their budgets allow) leave 3 free there. No plan holds: nothing moves, and the pod says why.
    _no_plan_for_a_budget(world)


def test_a_gang_of_two_four_gpu_pods_fits_by_moves_on_two_nodes() -> None:
    world = World(used=(5, 6, 5))
    world.loop.group_upsert(PodGroup("default", "g", min_member=2))
    for i in range(2):
        world.loop.pod_pending(world.pod(f"g{i}", gpus=4, labels={"gpusched.io/pod-group": "g"}))
    world.step()
    assert world.cluster.cache.pod("default/g0") is not None, world.events.seen
    assert world.cluster.cache.pod("default/g1") is not None
    assert sorted(world.used()) == [8, 8, 8] and world.made == 2


def test_a_refused_eviction_abandons_the_plan_and_releases_its_targets() -> None:
    world = World()
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.loop.run_until_idle()
    assert len(world.mover.pods) == 2
    refused = world.mover.pods[0]
    world.mover.pods = []
    world.loop.move_refused(refused.key, "Cannot evict pod as it would violate the pod's disruption budget.")
    assert world.moves.plans == {} and world.moves.leaving == {}
    assert "ConsolidationAbandoned" in world.reasons()
    # Not tried again (it would meet the same refusal) until the cluster changes.
    world.clock.now += 5.0
    world.loop.cluster_event(ClusterEvent.QUEUE_CHANGED)
    world.loop.run_until_idle()
    assert not world.mover.pods
    # Nothing is held any more: a one-GPU pod goes where a target was.
    world.loop.pod_pending(world.pod("small"))
    world.loop.run_until_idle()
    assert world.cluster.binder.decisions and world.cluster.binder.decisions[-1].pod.name == "small"


def test_a_budget_change_wakes_a_job_that_found_no_plan() -> None:
    world = World()
    raw = {"metadata": {"namespace": "default", "name": "all"}, "spec": {"selector": {"matchLabels": {"x": "y"}}}}
    world.loop.pod_pending(world.pod("big", gpus=4, labels={"x": "y"}))
    world.loop.mover = None
    world.loop.run_until_idle()
    world.loop.mover = world.mover
    world.moves.no_plan.keep("default/big", NoPlan(0, "found none", float("inf")))
    world.loop.budget_upsert(api_pdb.parse_pdb({**raw, "status": {"disruptionsAllowed": 1}}))
    assert len(world.moves.no_plan) == 0
    world.clock.now += 5.0
    world.loop.run_until_idle()
    assert len(world.mover.pods) == 2


def test_background_defragmentation_empties_the_emptiest_node_within_its_hourly_budget() -> None:
    world = World(used=(6, 5, 2), consolidation={"defragmentEverySeconds": 60, "defragmentPodsPerHour": 3})
    world.clock.now = 100.0
    assert world.loop.defragment()
    world.step()
    assert world.used()[2] == 0 and sum(world.used()) == 13, world.used()
    assert world.loop.action_state(Defragmenter).nodes_emptied == 1 and world.made == 2
    # Not again before its time; then the hour's budget (3 pods) has 1 left: n1's 5 pods are too many.
    assert not world.loop.defragment()
    world.clock.now += 120.0
    assert not world.loop.defragment() and world.made == 2


def test_background_defragmentation_is_off_unless_the_profile_sets_it_and_waits_while_work_is_pending() -> None:
    off = World(used=(6, 5, 2))
    off.clock.now = 1000.0
    assert not off.loop.defragment()
    on = World(used=(6, 5, 2), consolidation={"defragmentEverySeconds": 60})
    on.clock.now = 1000.0
    on.loop.pod_pending(on.pod("huge", gpus=16))  # fits nowhere: it waits in the queue
    on.loop.run_until_idle()
    assert not on.loop.defragment() and on.made == 0


def test_background_defragmentation_fills_no_whole_node_to_empty_another() -> None:
    # n0 is whole. Emptying n1 by moving its two pods onto n0 would leave as many GPUs on whole nodes as before: the
    # pods go to n2, which has room, or nowhere.
    room = World(used=(0, 2, 5), consolidation={"defragmentEverySeconds": 60})
    room.clock.now = 100.0
    assert room.loop.defragment()
    room.step()
    assert room.used() == [0, 0, 7] and room.made == 2
    full = World(used=(0, 2, 8), consolidation={"defragmentEverySeconds": 60})
    full.clock.now = 100.0
    assert not full.loop.defragment()
    assert full.made == 0 and full.used() == [0, 2, 8]


def _big_moved_two_pods_off_n1(world: World) -> dict[str, int]:
    """A 4-GPU pod gets room on n1 by moving two of its pods (one to n0, one to n2) and ends; each node's pods by
    name then."""
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.cluster.cache.pod("default/big") is not None and world.used() == [8, 8, 8]
    assert world.made == 2
    _gone(world, "big")
    return {e.pod.name: e.placement.slot for e in world.cluster.cache.pods()}


def _gone(world: World, *names: str) -> None:
    for name in names:
        world.cluster.cache.remove_pod(f"default/{name}")
        world.loop.pod_gone(f"default/{name}")
    world.loop.cluster_event(ClusterEvent.POD_DELETED)


def test_background_defragmentation_puts_no_pod_on_a_node_pods_left_while_their_cooldown_runs() -> None:
    world = World(consolidation={"defragmentEverySeconds": 60, "defragmentPodsPerHour": 2})
    on = _big_moved_two_pods_off_n1(world)
    # n2 keeps one pod (its replacement ends too): emptying it means moving that pod to n1, the node two pods left
    # for big less than the cooldown (600 s) ago; n1's four pods are over the hour's budget (2).
    _gone(world, *[name for name, slot in on.items() if slot == 2 and name != "d2-6"])
    assert world.used() == [8, 4, 1]
    world.clock.now += 60.0
    assert not world.loop.defragment() and world.made == 2
    world.clock.now += 600.0
    assert world.loop.defragment()
    world.step()
    assert world.used() == [8, 5, 0] and world.made == 3


def test_a_job_whose_only_plan_waits_for_a_cooldown_gets_it_when_the_cooldown_ends() -> None:
    world = World()
    on = _big_moved_two_pods_off_n1(world)
    # Only the replacement on n2 may move (the others give way to pods no controller recreates), and it was placed
    # by a move less than the cooldown (600 s) ago: a 5-GPU pod gets no plan, though n2 would hold it were that pod on
    # n1.
    replaced = next(name for name, slot in on.items() if slot == 2 and name.startswith("new"))
    _gone(world, *[name for name, slot in on.items() if slot in (1, 2) and name != replaced])
    for j in range(4):
        world.bound(world.pod(f"f1-{j}"), "n1")
    for j in range(3):
        world.bound(world.pod(f"f2-{j}"), "n2")
    assert world.used() == [8, 4, 4]
    world.loop.pod_pending(world.pod("next", gpus=5))
    world.step()
    assert world.made == 2 and world.cluster.cache.pod("default/next") is None
    assert [m for o, r, m in world.events.seen if r == "NoMovePlan" and o == "pod default/next"], world.events.seen
    # The cooldown ends, nothing else changes: the job searches again, and the pod moves to n1.
    world.clock.now += 600.0
    world.step()
    assert world.made == 3 and world.used() == [8, 5, 8]
    assert world.cluster.cache.pod("default/next") is not None


def test_a_replacement_waits_for_its_target_and_makes_no_room_of_its_own() -> None:
    world = World()
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.loop.run_until_idle()
    moved = world.mover.pods
    world.mover.pods = []
    # The controller's new pods come while the moved pods still run: their targets are free, so they bind there.
    world.loop.pod_pending(dataclasses.replace(moved[0], name="new-a", node_name="", phase="Pending"))
    assert world.moves.replacing("default/new-a")
    # Its target taken meanwhile by a pod the scheduler did not place: the replacement waits, moving nothing.
    target = world.moves.plans["default/big"].plan.moves[0].target
    world.bound(world.pod("intruder"), target)
    world.loop.run_until_idle()
    assert world.cluster.cache.pod("default/new-a") is None and not world.mover.pods
    assert "default/new-a" not in world.moves.no_plan  # no search ran for it
    assert not [o for o, r, _ in world.events.seen if r == "NoMovePlan" and o == "pod default/new-a"]


def test_a_plan_that_does_not_end_is_abandoned_and_what_it_held_released() -> None:
    world = World(used=(6, 5, 2), consolidation={"defragmentEverySeconds": 60})
    world.clock.now = 100.0
    assert world.loop.defragment()
    world.mover.pods = []  # the evictions never happen: no replacement comes
    assert "defragment:n2" in world.moves.plans
    world.clock.now += 121.0
    world.loop.pod_pending(world.pod("small"))
    world.loop.run_until_idle()  # a cycle of any job expires it
    assert world.moves.plans == {} and "ConsolidationAbandoned" in world.reasons()


def test_a_budget_with_an_empty_selector_is_weighed_as_the_eviction_api_weighs_it() -> None:
    world = World()
    # The Eviction API applies it to every pod of the namespace and would refuse: no plan is made, nothing moves.
    raw = {"metadata": {"namespace": "default", "name": "everything"}, "spec": {"selector": {}}}
    world.loop.budget_upsert(api_pdb.parse_pdb({**raw, "status": {"disruptionsAllowed": 0}}))
    _no_plan_for_a_budget(world)
    assert "ConsolidationAbandoned" not in world.reasons()


def test_a_pod_under_two_budgets_is_not_moved() -> None:
    world = World(used=(0, 0, 0))
    for i, count in enumerate((7, 6, 7)):
        for j in range(count):
            world.bound(world.pod(f"d{i}-{j}", owner=f"d{i}", labels={"app": f"d{i}", "tier": "x"}), f"n{i}")
    # Each budget alone allows what the plan needs; the Eviction API refuses a pod that two budgets select.
    for name, selector in (("by-app", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}), ("by-tier", {})):
        raw = {"metadata": {"namespace": "default", "name": name}, "spec": {"selector": selector}}
        world.loop.budget_upsert(api_pdb.parse_pdb({**raw, "status": {"disruptionsAllowed": 10}}))
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.made == 0 and world.cluster.cache.pod("default/big") is None


def test_a_no_plan_answer_is_kept_for_the_same_shape_until_a_pod_leaves() -> None:
    world = World(used=(7, 7, 7))
    # 3 GPUs free in all: no plan for a 4-GPU pod (moves only gather free GPUs), nor for another of its shape.
    moves = world.moves
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert moves.verdicts.get("impossible", 0) >= 1 and world.made == 0
    searches = sum(moves.verdicts.values())
    world.loop.pod_pending(world.pod("big2", gpus=4))
    world.step()
    assert sum(moves.verdicts.values()) == searches and moves.memo.recalled >= 1  # answered from memory
    # A pod leaves: room may exist now; the search runs again (and finds the plan).
    world.cluster.cache.remove_pod("default/d0-0")
    world.loop.pod_gone("default/d0-0")
    world.loop.cluster_event(ClusterEvent.POD_DELETED)
    world.step()
    assert sum(moves.verdicts.values()) > searches
    assert world.cluster.cache.pod("default/big") is not None or world.cluster.cache.pod("default/big2") is not None


def test_a_search_stopped_by_its_bounds_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(move_plan, "MAX_ATTEMPTS", 0)
    world = World()
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.moves.verdicts == {move_plan.OUT_OF_REACH: 1}
    assert world.moves.last_verdict["default/big"] == move_plan.OUT_OF_REACH


def _ranked(bare: int) -> tuple[World, move_room.Ranking]:
    """n0: ``bare`` 1-GPU pods nothing recreates; n1: three movable 2-GPU pods (2 free); n2 full; a 4-GPU pod ranked."""
    world = World(used=(0, 0, 0))
    for j in range(bare):
        world.bound(world.pod(f"bare-{j}"), "n0")
    for j in range(3):
        world.bound(world.pod(f"m-{j}", gpus=2, owner=f"m{j}"), "n1")
    world.bound(world.pod("full", gpus=8), "n2")
    return world, _rank_big(world, per_node=2)


def _rank_big(
    world: World,
    *,
    per_node: int,
    held_memo: move_room.HeldMemo | None = None,
    reads: move_room.Reads | None = None,
) -> move_room.Ranking:
    """The nodes ranked for a 4-GPU pod."""
    return move_room.rank(
        move_room.Room(world.cluster.cache.snapshot(), EMPTY, EMPTY),
        world.pod("big", gpus=4),
        lambda slot: world.moves.movable_on(slot, 0),
        per_node=per_node,
        enough=64,
        held_memo=held_memo,
        reads=reads,
        movable_known=lambda slots: world.moves.movable_known(slots, 0),
    )


def test_nodes_are_ranked_by_what_moves_free_for_the_job_not_by_what_is_free() -> None:
    # n0 has the most free (3 GPUs) but nothing to move; n1 needs one of its 2-GPU pods moved (to n0).
    world, ranking = _ranked(5)
    assert [(c.slot, c.moves, c.gpus) for c in ranking.candidates] == [(1, 1, 2)]
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.cluster.cache.pod("default/big") is not None and world.made == 1
    assert world.used() == [7, 8, 8]


def test_a_ranking_that_keeps_what_nodes_hold_between_searches_ranks_as_a_fresh_one() -> None:
    world, _ = _ranked(0)
    memo: move_room.HeldMemo = {}

    def ranked(held_memo: move_room.HeldMemo | None) -> list[tuple[int, int, int]]:
        return [(c.slot, c.moves, c.gpus) for c in _rank_big(world, per_node=1, held_memo=held_memo).candidates]

    assert ranked(memo) == ranked(memo) == ranked(None) == [(1, 1, 2)]
    # n1's 2-GPU pods give way to 1-GPU ones: moving one of them no longer frees 4 GPUs there.
    for j in range(3):
        world.cluster.cache.remove_pod(f"default/m-{j}")
    for j in range(6):
        world.bound(world.pod(f"s-{j}", owner=f"s{j}"), "n1")
    assert ranked(memo) == ranked(None) == []


def test_a_ranking_that_keeps_its_reads_of_the_nodes_between_searches_ranks_as_a_fresh_one() -> None:
    world, _ = _ranked(0)
    reads = move_room.Reads()

    def ranked(kept: move_room.Reads | None) -> tuple[list[tuple[int, int, int]], int, int, int]:
        found = _rank_big(world, per_node=1, reads=kept)
        return [(c.slot, c.moves, c.gpus) for c in found.candidates], found.no_room, found.stranded, found.movable_nodes

    assert ranked(reads) == ranked(reads) == ranked(None) == ([(1, 1, 2)], 0, 0, 1)
    # n0 fills up, n1 does not change: its 2-GPU pods now fit nowhere else, and the ranking says so.
    for j in range(7):
        world.bound(world.pod(f"fill-{j}"), "n0")
    assert ranked(reads) == ranked(None) == ([], 1, 3, 1)
    # n0 frees room again; then one of n1's pods leaves (n1's own row changes).
    world.cluster.cache.remove_pod("default/fill-0")
    world.cluster.cache.remove_pod("default/fill-1")
    assert ranked(reads) == ranked(None) == ([(1, 1, 2)], 0, 0, 1)
    world.cluster.cache.remove_pod("default/m-0")
    assert ranked(reads) == ranked(None) == ([(1, 1, 2)], 0, 0, 1)
    world.cluster.cache.remove_pod("default/m-1")
    assert ranked(reads) == ranked(None)


def test_pods_that_fit_on_no_other_node_are_left_out_before_any_what_if() -> None:
    _, ranking = _ranked(7)
    # The 2-GPU pods have nowhere to go (n0 has 1 GPU free): no node can hold the job, proved without a what-if.
    assert ranking.candidates == [] and ranking.stranded == 3 and ranking.no_room == 1


def test_a_queue_that_comes_to_allow_moves_lets_its_pods_move() -> None:
    world = World(used=(0, 0, 0), queues=[QueueSpec(name="fixed", moves="Never")])
    for i, count in enumerate((7, 6, 7)):
        for j in range(count):
            world.bound(world.pod(f"d{i}-{j}", owner=f"d{i}", labels={"gpusched.io/queue": "fixed"}), f"n{i}")
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    assert world.made == 0 and world.moves.verdicts
    # Remembered answers and the pods found movable are stale once the Queue allows moves.
    world.loop.queues_changed([QueueSpec(name="fixed", moves="Any")])
    world.loop.cluster_event(ClusterEvent.QUEUE_CHANGED)
    world.step()
    assert world.cluster.cache.pod("default/big") is not None and world.made == 2


def _short_of_cpus(world: World, *, used: int, cpus: int) -> None:
    """n1: ``used`` GPUs used by pods nothing recreates, and a pod holding ``cpus`` CPUs of its 64; n2 full."""
    for j in range(used):
        world.bound(world.pod(f"b{j}"), "n1")
    world.bound(world.pod("hog", gpus=0, cpu=str(cpus)), "n1")
    world.bound(world.pod("full", gpus=8), "n2")


def test_a_plan_that_moves_as_many_gpus_as_it_makes_room_for_is_not_made() -> None:
    world = World(used=(0, 0, 0))
    for j in range(8):
        world.bound(world.pod(f"a{j}", owner="a"), "n0")
    _short_of_cpus(world, used=7, cpus=50)  # n1: 1 GPU free, 7 CPUs
    # Moving one of n0's 1-GPU pods to n1 would make room for the 1-GPU pod that needs 8 CPUs: a swap of equals.
    world.loop.pod_pending(world.pod("one", gpus=1, cpu="8"))
    world.step()
    assert world.made == 0 and world.cluster.cache.pod("default/one") is None
    told = [m for _, r, m in world.events.seen if r == "NoMovePlan"]
    assert told and "as many GPUs or pods as the job asks GPUs" in told[0], told
    # GPU-milli and pods moved against the job's GPUs: fewer of both buys room; as many or more of either does not.
    one, two, four = world.pod("x", gpus=1), world.pod("y", gpus=2), world.pod("z", gpus=4)
    half, cpu = world.pod("h", gpus=1, milli=500), world.pod("c", gpus=0)
    assert move_plan.buys_more_than_it_costs([one], [two])
    assert not move_plan.buys_more_than_it_costs([one, one], [two])
    assert not move_plan.buys_more_than_it_costs([half], [one])  # a job of one GPU moves nothing
    assert not move_plan.buys_more_than_it_costs([half, half], [two])  # 1 GPU, but 2 pods for 2 GPUs
    assert move_plan.buys_more_than_it_costs([half, half, half], [four])
    assert not move_plan.buys_more_than_it_costs([cpu], [cpu])


def test_a_plan_moves_fewer_pods_than_the_gpus_it_makes_room_for() -> None:
    world = World(used=(0, 0, 0))
    for j, device in enumerate((6, 7)):
        notes = {"gpusched.io/gpu-ids": str(device)}
        world.bound(world.pod(f"s{j}", gpus=1, milli=500, owner=f"s{j}", annotations=notes), "n0")
    for j in range(6):
        world.bound(world.pod(f"a{j}"), "n0")
    _short_of_cpus(world, used=6, cpus=55)  # n1: 2 GPUs free, 3 CPUs
    # Two half-GPU pods off n0 (to n1) would make room for a 2-GPU pod of 8 CPUs: one GPU moved, but two pods for two.
    world.loop.pod_pending(world.pod("two", gpus=2, cpu="8"))
    world.step()
    assert world.made == 0 and world.cluster.cache.pod("default/two") is None


def _beside_half_used_gpus(plan_cost: str | None) -> World:
    """HAMi #2072's case: n0's 8 GPUs each half used by a movable 500-milli pod; n1 full but for half a GPU, n2 full
    (pods that do not move); a 600-milli pod comes."""
    world = World(used=(0, 0, 0), consolidation={"planCost": plan_cost} if plan_cost else None)  # type: ignore[dict-item]
    for device in range(8):
        notes = {"gpusched.io/gpu-ids": str(device)}
        world.bound(world.pod(f"s{device}", gpus=1, milli=500, owner=f"s{device}", annotations=notes), "n0")
    world.bound(world.pod("seven", gpus=7), "n1")
    world.bound(world.pod("half", gpus=1, milli=500, annotations={"gpusched.io/gpu-ids": "7"}), "n1")
    world.bound(world.pod("full", gpus=8), "n2")
    world.loop.pod_pending(world.pod("six", gpus=1, milli=600))
    world.step()
    return world


def test_a_shared_pod_beside_half_used_gpus_moves_one_smaller_pod_only_where_the_profile_says() -> None:
    # By default a job of one GPU or less moves nothing: the pod waits, told why.
    world = _beside_half_used_gpus(None)
    assert world.made == 0 and world.cluster.cache.pod("default/six") is None
    assert any("as many GPUs or pods as the job asks" in m for _, r, m in world.events.seen if r == "NoMovePlan")
    # FewerGPUsAndPodsOrOne: one 500-milli pod joins another on one GPU, and the 600-milli pod takes the freed one.
    world = _beside_half_used_gpus("FewerGPUsAndPodsOrOne")
    assert world.made == 1 and world.cluster.cache.pod("default/six") is not None, world.events.seen
    # ... one pod, smaller than the job: a pod as large as the job, or two, are still not moved for it.
    one, half, six = world.pod("o", gpus=1), world.pod("h", gpus=1, milli=500), world.pod("x", gpus=1, milli=600)
    rule = "FewerGPUsAndPodsOrOne"
    assert move_plan.buys_more_than_it_costs([half], [six], rule)
    assert not move_plan.buys_more_than_it_costs([six], [six], rule)
    assert not move_plan.buys_more_than_it_costs([half, half], [one], rule)
    assert not move_plan.buys_more_than_it_costs([half, half], [world.pod("t", gpus=2)], rule)
    assert move_plan.buys_more_than_it_costs([half, half], [one], "FewerGPUs") is False  # 1,000 milli for 1,000
    assert move_plan.buys_more_than_it_costs([one, one], [one], "Any")


def _most_of_a_node(consolidation: dict[str, int] | None = None) -> World:
    """n0: three movable 2-GPU pods (2 free); n1: 6 free, nothing movable; n2 full; an 8-GPU pod comes."""
    world = World(used=(0, 0, 0), consolidation=consolidation)
    for j in range(3):
        world.bound(world.pod(f"m{j}", gpus=2, owner=f"m{j}"), "n0")
    for j in range(2):
        world.bound(world.pod(f"bare{j}"), "n1")
    world.bound(world.pod("full", gpus=8), "n2")
    world.loop.pod_pending(world.pod("whole", gpus=8))
    world.step()
    return world


def test_a_pod_asking_most_of_a_node_gets_it_emptied_beyond_the_per_node_budget() -> None:
    # Three pods off n0 exceed maxPodsPerNode (2): every set within it is too small, and no subset search is needed:
    # the node's pods largest first, within maxPodsPerWholeNode (4).
    world = _most_of_a_node()
    assert world.cluster.cache.pod("default/whole") is not None, world.events.seen
    assert world.made == 3 and world.used() == [8, 8, 8]
    assert world.moves.verdicts == {move_plan.PLAN: 1}


def test_the_whole_node_budget_bounds_emptying_a_node() -> None:
    world = _most_of_a_node({"maxPodsPerWholeNode": 2})
    assert world.made == 0 and world.cluster.cache.pod("default/whole") is None
    assert world.moves.verdicts == {move_plan.IMPOSSIBLE: 1}
    off = _most_of_a_node({"maxPodsPerWholeNode": 0, "maxPodsPerNode": 4})
    # Off, the per-node sets still reach it: 3 pods within maxPodsPerNode 4 and maxPodsPerPlan 4.
    assert off.cluster.cache.pod("default/whole") is not None and off.made == 3


def test_a_node_that_cannot_be_emptied_is_remembered_until_a_pod_leaves() -> None:
    world = World(used=(0, 0, 0))
    for j in range(3):
        world.bound(world.pod(f"m{j}", gpus=2, owner=f"m{j}"), "n0")
    for j in range(3):
        world.bound(world.pod(f"bare{j}"), "n1")
    world.bound(world.pod("seven", gpus=7), "n2")
    # 8 GPUs free in all (2, 5, 1), but n0's three 2-GPU pods have room for two of them elsewhere: no plan.
    moves = world.moves
    world.loop.pod_pending(world.pod("whole", gpus=8))
    world.step()
    assert world.made == 0 and moves.verdicts == {move_plan.IMPOSSIBLE: 1}
    world.loop.pod_pending(world.pod("whole2", gpus=8))
    world.step()
    assert sum(moves.verdicts.values()) == 1 and moves.memo.recalled >= 1  # the same shape: answered from memory
    world.cluster.cache.remove_pod("default/bare0")
    world.loop.pod_gone("default/bare0")
    world.loop.cluster_event(ClusterEvent.POD_DELETED)
    world.step()
    assert moves.verdicts.get(move_plan.PLAN) == 1 and world.made == 3
    assert world.cluster.cache.pod("default/whole") is not None or world.cluster.cache.pod("default/whole2") is not None


class OneBudget:
    """Issue 46's cluster: 1-GPU pods of single-replica ReplicaSets on three 8-GPU nodes at 7, 6 and 7 GPUs used; 8
    of them (2, 4 and 2 per node) labelled ``app: web`` under one PodDisruptionBudget of maxUnavailable 1, the others
    annotated never to move. The budget is kept as the API server and the disruption controller keep it: an eviction
    costs it one at once, and is refused (HTTP 429) when it allows none; it allows one again when all 8 pods run."""

    def __init__(self, *, consolidation: dict[str, int] | None = None, starts: bool = True) -> None:
        self.world = World(used=(0, 0, 0), consolidation=consolidation)
        #: Whether a bound pod starts running (False: it stays Pending on its node, as with an image never pulled).
        self.starts = starts
        never = {"gpusched.io/consolidation": "never"}
        for i, (web, kept) in enumerate(((2, 5), (4, 2), (2, 5))):
            for j in range(web):
                self.world.bound(self.world.pod(f"web-{i}-{j}", owner=f"web-{i}-{j}", labels={"app": "web"}), f"n{i}")
            for j in range(kept):
                self.world.bound(self.world.pod(f"kept-{i}-{j}", owner=f"kept-{i}-{j}", annotations=never), f"n{i}")
        self.allowed = -1
        #: The most web pods not running at one time, and the evictions the API server refused.
        self.most_down = 0
        self.refused = 0
        self.recount()

    def running(self) -> int:
        pods = self.world.cluster.cache.pods()
        return sum(1 for e in pods if e.pod.labels.get("app") == "web" and e.pod.phase == "Running")

    def recount(self) -> None:
        """The disruption controller: 8 wanted, at most 1 unavailable."""
        self.most_down = max(self.most_down, 8 - self.running())
        self.publish(max(0, self.running() - 7))

    def publish(self, allowed: int) -> None:
        if allowed == self.allowed:
            return
        self.allowed = allowed
        raw = {
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        }
        self.world.loop.budget_upsert(api_pdb.parse_pdb({**raw, "status": {"disruptionsAllowed": allowed}}))

    def step(self, rounds: int = 10) -> None:
        """Cycles, bindings (running or not), the budget's status, and evictions through the Eviction API."""
        world = self.world
        for _ in range(rounds):
            world.clock.now += 5.0
            world.loop.carry_out_moves()  # as the operator does between batches of cycles
            world.loop.run_until_idle()
            for decision in world.cluster.binder.decisions:
                if self.starts or decision.pod.name == "big":
                    world.bound(decision.pod, decision.node)
                else:
                    placed = dataclasses.replace(decision.pod, node_name=decision.node, phase="Pending")
                    world.cluster.cache.upsert_pod(placed)
                    world.loop.pod_placed(placed)
            world.cluster.binder.decisions.clear()
            self.recount()
            moved, world.mover.pods = world.mover.pods, []
            for pod in moved:
                if self.allowed < 1:
                    self.refused += 1
                    message = "HTTP 429: Cannot evict pod as it would violate the pod's disruption budget."
                    world.loop.move_refused(pod.key, message)
                    continue
                self.publish(self.allowed - 1)
                world.cluster.cache.remove_pod(pod.key)
                world.loop.pod_gone(pod.key)
                world.made += 1
                world.loop.pod_pending(dataclasses.replace(pod, name=f"new{world.made}", node_name="", phase="Pending"))
                self.most_down = max(self.most_down, 8 - self.running())
            if moved:
                world.loop.cluster_event(ClusterEvent.POD_DELETED)


def test_two_moves_under_a_budget_that_allows_one_at_a_time_are_carried_out_one_after_the_other() -> None:
    cluster = OneBudget()
    world = cluster.world
    world.loop.pod_pending(world.pod("big", gpus=4))
    cluster.step()
    big = world.cluster.cache.pod("default/big")
    assert big is not None, world.events.seen
    assert big.pod.node_name == "n1" and world.used() == [8, 8, 8]
    # Two web pods moved, one after the other: never two down at once, no eviction refused, every web pod runs again.
    assert world.made == 2 and cluster.most_down == 1 and cluster.refused == 0
    assert cluster.running() == 8
    assert world.reasons().count("Moved") == 2 and "ConsolidationAbandoned" not in world.reasons()
    (told,) = [m for _, r, m in world.events.seen if r == "Consolidating"]
    assert "one at a time" in told, told
    assert world.moves.plans == {} and world.moves.leaving == {}


def test_a_step_not_done_within_its_bound_abandons_the_plan_and_releases_what_it_held() -> None:
    # The first moved pod's replacement is bound but never runs (an image never pulled): the budget never allows the
    # second eviction.
    cluster = OneBudget(consolidation={"stepTimeoutSeconds": 60}, starts=False)
    world = cluster.world
    world.loop.pod_pending(world.pod("big", gpus=4))
    cluster.step(rounds=2)
    first, second = world.moves.plans["default/big"].plan.moves
    # Every free GPU is held for the plan (the job's node, the second target): a 1-GPU pod waits.
    world.loop.pod_pending(world.pod("small"))
    cluster.step(rounds=8)
    assert world.made == 1 and world.cluster.cache.pod("default/small") is None
    assert world.cluster.cache.pod(second.pod.key) is not None and "ConsolidationAbandoned" not in world.reasons()
    cluster.step(rounds=4)  # 60 s after the first eviction
    (why,) = [m for _, r, m in world.events.seen if r == "ConsolidationAbandoned"]
    assert why.startswith(
        f"step 2 of 2 did not come within 60s: the replacement of {first.pod.key} is not Running on {first.target}"
    ), why
    # The second pod was never evicted; everything held is released: the 1-GPU pod binds. The 4-GPU pod waits, told
    # why (with one web pod not running, the budget allows no eviction).
    assert world.made == 1 and cluster.refused == 0 and world.cluster.cache.pod(second.pod.key) is not None
    assert world.moves.plans == {} and world.moves.leaving == {}
    assert world.cluster.cache.pod("default/small") is not None
    assert world.cluster.cache.pod("default/big") is None
    told = [m for o, r, m in world.events.seen if r == "NoMovePlan" and o == "pod default/big"]
    assert told and "PodDisruptionBudget" in told[-1], told


def test_a_replica_that_stops_leading_in_the_middle_of_a_plan_in_steps_takes_no_further_step() -> None:
    cluster = OneBudget()
    world = cluster.world
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.loop.run_until_idle()
    (evicted,) = world.mover.pods  # the first step
    cluster.publish(0)
    world.cluster.cache.remove_pod(evicted.key)
    world.loop.pod_gone(evicted.key)
    world.loop.pod_pending(dataclasses.replace(evicted, name="new1", node_name="", phase="Pending"))
    world.loop.run_until_idle()
    (replacement,) = world.cluster.binder.decisions  # bound to its target, not running yet
    world.loop.leadership_lost()
    assert world.moves.plans == {} and world.moves.leaving == {}
    # The replacement runs, the budget allows one again: this replica, no longer leading, evicts nothing more
    # (whoever leads now searches from what it finds).
    world.bound(replacement.pod, replacement.node)
    cluster.recount()
    assert cluster.allowed == 1 and world.mover.pods == [evicted]


def test_a_budget_that_does_not_allow_the_next_step_in_time_abandons_the_plan_and_says_which() -> None:
    cluster = OneBudget(consolidation={"stepTimeoutSeconds": 60})
    world = cluster.world
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.loop.run_until_idle()
    (evicted,) = world.mover.pods
    second = world.moves.plans["default/big"].plan.moves[1].pod
    cluster.step(rounds=1)  # the first eviction goes through
    # Another pod under the budget stops running before the first replacement runs: the budget allows nothing.
    other = world.cluster.cache.pod("default/web-0-0")
    assert other is not None
    world.cluster.cache.upsert_pod(dataclasses.replace(other.pod, phase="Pending"))
    cluster.step(rounds=13)
    (why,) = [m for _, r, m in world.events.seen if r == "ConsolidationAbandoned"]
    assert why.startswith(
        f"step 2 of 2 did not come within 60s: PodDisruptionBudget default/web allows no eviction of {second.key}"
    ), why
    assert world.made == 1 and cluster.refused == 0 and world.cluster.cache.pod(second.key) is not None
    assert world.moves.plans == {} and world.cluster.cache.pod("default/big") is None
    assert evicted.key not in {e.pod.key for e in world.cluster.cache.pods()}


def test_the_next_step_waits_for_a_status_of_the_budget_seen_after_the_last_eviction() -> None:
    cluster = OneBudget()
    world = cluster.world
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.loop.run_until_idle()
    (evicted,) = world.mover.pods
    # The API server counts the eviction in the budget, but that status has not reached the scheduler yet; the pod
    # goes and its replacement runs on its target.
    world.cluster.cache.remove_pod(evicted.key)
    world.loop.pod_gone(evicted.key)
    world.loop.pod_pending(dataclasses.replace(evicted, name="new1", node_name="", phase="Pending"))
    world.loop.run_until_idle()
    (decision,) = world.cluster.binder.decisions
    world.bound(decision.pod, decision.node)
    # The budget as last seen, from before the eviction, allows one: no step on its word.
    assert world.mover.pods == [evicted]
    cluster.publish(0)  # the eviction's count arrives
    assert world.mover.pods == [evicted]
    cluster.publish(1)  # the disruption controller's, with the replacement running
    assert len(world.mover.pods) == 2 and world.mover.pods[1].key != evicted.key
