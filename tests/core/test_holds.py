"""The holds registry: one place for the room kept for a job (a preemptor's, a gang's, a move plan's, a starving
job's), what each kind keeps every other job off, until when, and nominations kept once."""

from __future__ import annotations

import numpy as np

from scheduler.api.objects import pod as api_pod
from scheduler.core.holds import Hold, Holds, Kind
from scheduler.core.loop import SchedulingLoop
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events
from tests.core.test_tenancy import Evictions

FOO = "example.com/foo"
NODES = ("n0", "n1", "n2", "n3", "n4")


def _loop() -> tuple[Cluster, SchedulingLoop, Clock, Evictions]:
    cluster = Cluster([objects.node(name, extra={FOO: "1"}) for name in NODES], ("fit",))
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    evictions = Evictions()
    loop.evictor = evictions
    return cluster, loop, clock, evictions


def _pod(name: str, priority: int, **labels: str) -> api_pod.PodRequest:
    raw = objects.pod(name, extra={FOO: "1"}, labels=labels or None)
    raw["spec"]["priority"] = priority
    return api_pod.parse_pod(raw)


def _on(cluster: Cluster, *names: str) -> np.ndarray:
    mask = np.zeros(cluster.cache.arrays.slots, dtype=bool)
    for name in names:
        slot = cluster.cache.slot_of(name)
        assert slot is not None
        mask[slot] = True
    return mask


def _off(holds: Holds, cluster: Cluster, key: str, priority: int = 0) -> set[str]:
    """The nodes job ``key``'s cycles may not use."""
    reserved = holds.context(key, priority=priority).reserved
    if reserved is None:
        return set()
    return _names(cluster, reserved)


def _names(cluster: Cluster, mask: np.ndarray) -> set[str]:
    """The nodes of ``mask`` (the arrays have room for more nodes than the cluster has)."""
    names = cluster.cache.names
    return {names[slot] for slot in np.flatnonzero(mask) if slot < len(names)}


def test_each_kind_keeps_the_jobs_it_is_not_for_off_its_nodes() -> None:
    cluster, loop, _, _ = _loop()
    holds = loop.holds
    holds.hold(kind=Kind.GANG, job="default/gang", slots=_on(cluster, "n0"), priority=100)
    holds.hold(kind=Kind.STARVATION, job="default/big", slots=_on(cluster, "n1"), queue="default")
    only = {"default/mover": _on(cluster, "n2"), "default/replacement": _on(cluster, "n3")}
    holds.hold(kind=Kind.MOVE_PLAN, job="default/mover", slots=_on(cluster, "n2", "n3"), only=only)
    # Anyone else: off all of them.
    assert _off(holds, cluster, "default/other") == {"n0", "n1", "n2", "n3"}
    # A move plan's job may go only to its nodes, a replacement only to its move's target.
    assert _off(holds, cluster, "default/mover") == {"n0", "n1", "n3", "n4"}
    assert _off(holds, cluster, "default/replacement") == {"n0", "n1", "n2", "n4"}
    # Its own hold is no hold; a reservation and a move plan hold it off whatever its priority.
    assert _off(holds, cluster, "default/gang", 100) == {"n1", "n2", "n3"}
    # A job holding room for its own preemption shares the nodes held for its priority or lower, not higher ones.
    holds.hold(kind=Kind.PREEMPTION, job="default/peer", slots=_on(cluster, "n4"), priority=100)
    assert _off(holds, cluster, "default/peer", 100) == {"n1", "n2", "n3"}
    holds.hold(kind=Kind.GANG, job="default/gang", slots=_on(cluster, "n0"), priority=1000)
    assert _off(holds, cluster, "default/peer", 100) == {"n0", "n1", "n2", "n3"}


def test_the_cycle_gets_every_kind_of_hold_from_the_registry_in_one_mask() -> None:
    cluster, loop, _, _ = _loop()
    loop.holds.hold(kind=Kind.GANG, job="default/gang", slots=_on(cluster, "n0"), priority=100)
    loop.holds.hold(
        kind=Kind.MOVE_PLAN, job="default/mover", slots=_on(cluster, "n2"), only={"default/mover": _on(cluster, "n2")}
    )
    reserved = loop.cycle_context("default/other").reserved
    assert reserved is not None
    assert _names(cluster, reserved) == {"n0", "n2"}
    loop.pod_pending(_pod("other", 0))
    loop.run_until_idle()
    assert cluster.binder.decisions[0].node == "n1"  # the first node not held


def test_a_hold_with_an_end_is_dropped_by_the_registry_once_its_time_is_up_and_its_maker_is_told() -> None:
    cluster, loop, clock, _ = _loop()
    holds = loop.holds
    told: list[Hold] = []
    holds.when_expired(Kind.STARVATION, told.append)
    clock.now = 5.0
    holds.hold(kind=Kind.STARVATION, job="default/big", slots=_on(cluster, "n0"), until=10.0)
    holds.hold(kind=Kind.GANG, job="default/gang", slots=_on(cluster, "n1"))  # until released
    assert (holds.reservation is not None and holds.reservation.made, told) == (5.0, [])
    clock.now = 9.5
    assert _off(holds, cluster, "default/other") == {"n0", "n1"}
    clock.now = 10.0
    assert _off(holds, cluster, "default/other") == {"n1"}
    assert [hold.job for hold in told] == ["default/big"] and holds.reservation is None
    clock.now = 1e9
    assert _off(holds, cluster, "default/other") == {"n1"}


def test_a_job_placed_or_gone_frees_its_holds_but_a_move_plan_ends_with_its_plan() -> None:
    cluster, loop, _, _ = _loop()
    holds = loop.holds
    for kind, node in ((Kind.STARVATION, "n0"), (Kind.PREEMPTION, "n1")):
        holds.hold(kind=kind, job="default/big", slots=_on(cluster, node))
    holds.hold(kind=Kind.MOVE_PLAN, job="default/big", slots=_on(cluster, "n2"), only={"default/big": _on(cluster)})
    holds.release("default/big")
    assert _off(holds, cluster, "default/other") == {"n2"}  # a replacement's target is still held
    holds.release("default/big", kind=Kind.MOVE_PLAN)
    assert _off(holds, cluster, "default/other") == set()


def _preempted(loop: SchedulingLoop, clock: Clock) -> api_pod.PodRequest:
    """Fill every node with a pod of priority 1, then let a pod of priority 100 (``medium``) preempt one; the victim."""
    for i in range(len(NODES)):
        clock.now = float(i)
        loop.pod_pending(_pod(f"low{i}", 1))
        loop.run_until_idle()
    clock.now = 10.0
    loop.pod_pending(_pod("medium", 100))
    loop.run_until_idle()
    evictions = loop.evictor
    assert isinstance(evictions, Evictions)
    (victim,) = evictions.pods
    return victim


def test_a_nomination_is_kept_once_and_its_node_outlives_its_room_until_the_pod_is_told() -> None:
    _, loop, clock, evictions = _loop()
    victim = _preempted(loop, clock)
    nominated = loop.holds.nomination("default/medium")
    assert nominated is not None and not nominated.lapsed
    node = evictions.nominated["default/medium"]
    assert (nominated.node, nominated.priority, nominated.victims) == (node, 100, (victim.key,))
    assert [p.pod.name for p in loop.holds.nominated_pods("default/other", 0)] == ["medium"]
    # An update of the pod is what is counted and searched with from then on.
    loop.pod_pending(_pod("medium", 100, team="a"))
    updated = loop.holds.nomination("default/medium")
    assert updated is not None and updated.pod is not None and updated.pod.labels == {"team": "a"}
    # Its room is released (as when a pod of higher priority takes the node over): nobody counts it there any more,
    # but the pod still shows the node, and the registry remembers it (to clear it if the pod finds no room) ...
    loop.holds.release("default/medium")
    lapsed = loop.holds.nomination("default/medium")
    assert lapsed is not None and lapsed.lapsed and lapsed.node == node
    assert loop.holds.nominated_pods("default/other", 0) == []
    assert evictions.nominated["default/medium"] == node
    # ... until the pod is gone.
    loop.pod_gone("default/medium")
    assert loop.holds.nomination("default/medium") is None


def test_a_failed_eviction_clears_the_nomination_it_was_made_for() -> None:
    _, loop, clock, evictions = _loop()
    victim = _preempted(loop, clock)
    loop.eviction_failed(victim.key, "Forbidden")
    assert evictions.nominated["default/medium"] == ""
    assert loop.holds.nomination("default/medium") is None
