"""A single pod preempting single pods, as kube-scheduler's DefaultPreemption does it: victims of lower priority
on one node, as few and as unimportant as the pod allows, PodDisruptionBudgets spared when another node can make
room, ``preemptionPolicy: Never`` honoured, the nominated node told and cleared."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pdb as api_pdb
from scheduler.api.objects import pod as api_pod
from scheduler.core import gang
from scheduler.core.cycle import EMPTY
from scheduler.core.loop import SchedulingLoop
from scheduler.core.preemption import nodes as node_preemption
from scheduler.core.preemption import victims as reclaim
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import dra_objects as dra
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events, gone
from tests.core.test_tenancy import Evictions
from tests.plugins.test_dra import DraCluster, pod_with

FOO = "example.com/foo"


def _loop(*nodes: tuple[str, int]) -> tuple[Cluster, SchedulingLoop, Clock, Events, Evictions]:
    """Nodes named and sized in ``example.com/foo``, as Kubernetes' SchedulerPreemption tests patch them."""
    cluster = Cluster([objects.node(name, extra={FOO: str(foo)}) for name, foo in nodes], ("fit",))
    clock = Clock()
    events = Events()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    evictions = Evictions()
    loop.evictor = evictions
    return cluster, loop, clock, events, evictions


def _pod(
    name: str,
    foo: int,
    priority: int,
    *,
    node: str = "",
    labels: dict[str, str] | None = None,
    never: bool = False,
) -> api_pod.PodRequest:
    raw: dict[str, Any] = objects.pod(
        name,
        extra={FOO: str(foo)},
        node_selector={"kubernetes.io/hostname": node} if node else None,
        labels=labels,
    )
    raw["spec"]["priority"] = priority
    if never:
        raw["spec"]["preemptionPolicy"] = "Never"
    return api_pod.parse_pod(raw)


def _run(loop: SchedulingLoop, clock: Clock, pods: list[api_pod.PodRequest]) -> None:
    """Place ``pods`` one after another, a second apart (so the later ones have started later)."""
    for pod in pods:
        clock.now += 1.0
        loop.pod_pending(pod)
        loop.run_until_idle()


def _placed(cluster: Cluster) -> dict[str, str]:
    return {d.pod.name: d.node for d in cluster.binder.decisions}


def _budget(name: str, app: str, allowed: int, disrupted: tuple[str, ...] = ()) -> api_pdb.DisruptionBudget:
    return api_pdb.parse_pdb(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": {p: "2026-01-01T00:00:00Z" for p in disrupted}},
        }
    )


def test_basic_preemption_takes_the_one_low_priority_pod_and_nominates_its_node() -> None:
    # Kubernetes' "validates basic preemption works": two pods of 2 on each node of 5, the first of priority 1,
    # the others 100; a pod of priority 1000 asking for 2 preempts only the low one, on its node.
    cluster, loop, clock, events, evictions = _loop(("n0", 5), ("n1", 5), ("n2", 5))
    _run(
        loop,
        clock,
        [_pod(f"p{n}-{j}", 2, 1 if (n, j) == (0, 0) else 100, node=f"n{n}") for n in range(3) for j in range(2)],
    )
    _run(loop, clock, [_pod("preemptor", 2, 1000)])
    assert [p.name for p in evictions.pods] == ["p0-0"]
    assert evictions.nominated == {"default/preemptor": "n0"}
    # As kube-scheduler: its FailedScheduling comes after its PostFilter made room.
    assert events.reasons("pod default/preemptor") == ["Preempting", "FailedScheduling"]
    assert "on node n0" in events.messages("pod default/p0-0")[-1]
    gone(cluster, loop, clock, evictions.pods)
    assert _placed(cluster)["preemptor"] == "n0"


def test_victims_are_put_back_most_important_first_so_only_what_is_needed_goes() -> None:
    # Kubernetes' "runs ReplicaSets to verify preemption running path": 200, 300 and 450 of 1000 held at
    # priorities 1, 2, 3; a pod of priority 4 asking for 500 preempts the first two and spares the 450.
    _, loop, clock, _, evictions = _loop(("n0", 1000))
    _run(loop, clock, [_pod("rs1", 200, 1), _pod("rs2", 300, 2), _pod("rs3", 450, 3)])
    _run(loop, clock, [_pod("rs4", 500, 4)])
    assert sorted(p.name for p in evictions.pods) == ["rs1", "rs2"]


def test_a_pod_budget_protects_its_pods_when_another_node_can_make_room() -> None:
    def run(budgets: list[api_pdb.DisruptionBudget]) -> list[str]:
        _, loop, clock, _, evictions = _loop(("n0", 2), ("n1", 2))
        for budget in budgets:
            loop.budget_upsert(budget)
        # web (n1) started first: without budgets, n0's db, the victim that started last, goes.
        _run(loop, clock, [_pod("web", 2, 0, node="n1", labels={"app": "web"})])
        _run(loop, clock, [_pod("db", 2, 0, node="n0", labels={"app": "db"})])
        _run(loop, clock, [_pod("urgent", 2, 10)])
        return [p.name for p in evictions.pods]

    assert run([]) == ["db"]
    assert run([_budget("db", "db", allowed=0)]) == ["web"]
    # A budget that still allows a disruption, or one that already counts db as disrupted, is not exceeded.
    assert run([_budget("db", "db", allowed=1)]) == ["db"]
    assert run([_budget("db", "db", allowed=0, disrupted=("db",))]) == ["db"]
    # Only budget-protected pods can make room: they are preempted all the same (a budget is a preference).
    assert run([_budget("db", "db", allowed=0), _budget("web", "web", allowed=0)]) == ["db"]


def test_on_one_node_the_budget_protected_pod_is_spared_first() -> None:
    _, loop, clock, _, evictions = _loop(("n0", 2))
    loop.budget_upsert(_budget("db", "db", allowed=0))
    # db started last: without its budget it would be the victim (the less important of two equal pods).
    _run(loop, clock, [_pod("web", 1, 0, labels={"app": "web"}), _pod("db", 1, 0, labels={"app": "db"})])
    _run(loop, clock, [_pod("urgent", 1, 10)])
    assert [p.name for p in evictions.pods] == ["web"]


def test_budget_violations_come_before_victim_priority_when_choosing_the_node() -> None:
    _, loop, clock, _, evictions = _loop(("n0", 1), ("n1", 1))
    loop.budget_upsert(_budget("db", "db", allowed=0))
    _run(loop, clock, [_pod("db", 1, 1, node="n0", labels={"app": "db"}), _pod("web", 1, 5, node="n1")])
    _run(loop, clock, [_pod("urgent", 1, 10)])
    assert [p.name for p in evictions.pods] == ["web"]


def test_the_node_with_the_lowest_highest_victim_priority_is_chosen() -> None:
    _, loop, clock, _, evictions = _loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_pod("a", 2, 5, node="n0"), _pod("b", 2, 3, node="n1")])
    _run(loop, clock, [_pod("urgent", 2, 10)])
    assert [p.name for p in evictions.pods] == ["b"]


def test_then_the_smallest_sum_of_victim_priorities() -> None:
    _, loop, clock, _, evictions = _loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_pod("a3", 1, 3, node="n0"), _pod("a2", 1, 2, node="n0")])
    _run(loop, clock, [_pod("b3", 1, 3, node="n1"), _pod("b1", 1, 1, node="n1")])
    _run(loop, clock, [_pod("urgent", 2, 10)])
    assert sorted(p.name for p in evictions.pods) == ["b1", "b3"]


def test_then_the_node_whose_highest_priority_victims_started_last() -> None:
    _, loop, clock, _, evictions = _loop(("n0", 1), ("n1", 1), ("n2", 1))
    _run(loop, clock, [_pod("old", 1, 3, node="n0"), _pod("mid", 1, 3, node="n2"), _pod("young", 1, 3, node="n1")])
    _run(loop, clock, [_pod("urgent", 1, 10)])
    assert [p.name for p in evictions.pods] == ["young"]


def test_node_costs_follow_kube_schedulers_order() -> None:
    def victims(node: str, *pods: tuple[int, float], violations: int = 0) -> node_preemption.NodeVictims:
        candidates = [
            reclaim.Candidate(f"{node}/{i}", "default", prio, started, [_pod(f"{node}-{i}", 1, prio)])
            for i, (prio, started) in enumerate(pods)
        ]
        return node_preemption.NodeVictims(node, 0, candidates, violations)

    ordered = [
        victims("a", (1, 5.0), (1, 5.0), violations=0),  # no violation beats everything below
        victims("b", (0, 1.0), violations=1),
        victims("c", (0, 1.0), violations=2),
    ]
    assert sorted(ordered, key=lambda v: v.cost(0)) == ordered
    ordered = [
        victims("a", (2, 1.0)),  # lowest top priority
        victims("b", (3, 9.0)),
    ]
    assert sorted(ordered, key=lambda v: v.cost(0)) == ordered
    ordered = [
        victims("a", (3, 1.0)),  # then the smallest sum, which counts every victim
        victims("b", (3, 1.0), (1, 1.0)),
    ]
    assert sorted(ordered, key=lambda v: v.cost(0)) == ordered
    # Negative priorities: two victims never sum to less than one (kube-scheduler's offset per victim).
    assert victims("a", (-100, 1.0)).cost(0) < victims("b", (-100, 1.0), (-200, 1.0)).cost(0)
    ordered = [
        victims("a", (3, 9.0), (1, 1.0)),  # then the latest start among the highest-priority victims
        victims("b", (3, 2.0), (1, 8.0)),
    ]
    assert sorted(ordered, key=lambda v: v.cost(0)) == ordered


def test_preemption_policy_never_waits_for_room_instead() -> None:
    cluster, loop, clock, events, evictions = _loop(("n0", 1))
    _run(loop, clock, [_pod("low", 1, 0)])
    _run(loop, clock, [_pod("polite", 1, 100, never=True)])
    assert evictions.pods == []
    assert evictions.nominated == {}
    assert "Preempting" not in events.reasons("pod default/polite")
    gone(cluster, loop, clock, [_pod("low", 1, 0)])
    assert "polite" in _placed(cluster)


def test_failed_scheduling_says_why_preemption_did_not_help_as_kube_scheduler_does() -> None:
    # n0 holds a pod of the preemptor's priority (nothing to evict), n1 a lower one whose eviction frees 1 of the 2
    # asked, n2 has room behind a taint (no eviction changes that), n3 is smaller than the pod even empty (kube-
    # scheduler's NodeResourcesFit calls that unresolvable): kube-scheduler's DefaultPreemption counts the nodes by
    # why after its own sentence, as "preemption: 0/N nodes are available: ...".
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    cluster = Cluster(
        [
            objects.node("n0", extra={FOO: "2"}),
            objects.node("n1", extra={FOO: "2"}),
            objects.node("n2", extra={FOO: "4"}, taints=[taint]),
            objects.node("n3", extra={FOO: "1"}),
        ],
        ("fit",),
    )
    clock, events, evictions = Clock(), Events(), Evictions()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    loop.evictor = evictions
    _run(loop, clock, [_pod("equal", 2, 10, node="n0"), _pod("low", 1, 1, node="n1"), _pod("mid", 1, 10, node="n1")])
    _run(loop, clock, [_pod("big", 2, 10), _pod("big-too", 2, 10)])  # the second: the search found nothing already
    assert evictions.pods == []
    said = (
        "0/4 nodes are available: 3 Insufficient example.com/foo, 1 node(s) had untolerated taint {dedicated: ml}."
        " preemption: 0/4 nodes are available: 2 Preemption is not helpful for scheduling, 1 Insufficient"
        " example.com/foo, 1 No preemption victims found for incoming pod."
    )
    assert events.messages("pod default/big") == [said]
    assert events.messages("pod default/big-too") == [said]


def test_a_pod_that_preempts_or_may_not_says_so_as_kube_scheduler_does() -> None:
    _, loop, clock, events, evictions = _loop(("n0", 1))
    _run(loop, clock, [_pod("low", 1, 0)])
    _run(loop, clock, [_pod("polite", 1, 100, never=True)])
    assert events.messages("pod default/polite") == [
        "0/1 nodes are available: 1 Insufficient example.com/foo. preemption: not eligible due to"
        " preemptionPolicy=Never."
    ]
    _run(loop, clock, [_pod("urgent", 1, 100)])
    assert [p.name for p in evictions.pods] == ["low"]
    # Preemption made room: kube-scheduler's message says only why it did not fit now.
    failed = [m for m in events.messages("pod default/urgent") if m.startswith("0/")]
    assert failed == ["0/1 nodes are available: 1 Insufficient example.com/foo."]
    clock.now += 30.0  # past its backoff
    loop.cluster_event("node updated")
    loop.run_until_idle()  # tried again while its victim terminates: it waits for it
    failed = [m for m in events.messages("pod default/urgent") if m.startswith("0/")]
    assert len(failed) == 2 and failed[-1] == (
        "0/1 nodes are available: 1 Insufficient example.com/foo. preemption: not eligible due to a terminating"
        " pod on the nominated node."
    )


def test_victims_of_equal_or_higher_priority_are_never_chosen() -> None:
    _, loop, clock, _, evictions = _loop(("n0", 1), ("n1", 1), ("n2", 2))
    _run(loop, clock, [_pod("equal", 1, 10, node="n0"), _pod("higher", 1, 50, node="n1")])
    _run(loop, clock, [_pod("lower", 1, 1, node="n2"), _pod("mixed", 1, 10, node="n2")])
    _run(loop, clock, [_pod("urgent", 2, 10)])
    assert evictions.pods == []  # n2 would need "mixed", of the preemptor's own priority


def test_a_higher_priority_pod_counts_victims_already_terminating_and_takes_the_node_over() -> None:
    # Kubernetes' async preemption test in small: a medium pod's victim is still terminating when a high pod
    # arrives; the high pod counts it, preempts only what else it needs, and the medium pod's nomination is cleared.
    cluster, loop, clock, _, evictions = _loop(("n0", 2))
    _run(loop, clock, [_pod("low-a", 1, 1), _pod("low-b", 1, 1)])
    _run(loop, clock, [_pod("medium", 1, 100)])
    assert [p.name for p in evictions.pods] == ["low-b"]
    assert evictions.nominated == {"default/medium": "n0"}
    _run(loop, clock, [_pod("high", 2, 1000)])
    assert [p.name for p in evictions.pods] == ["low-b", "low-a"]  # low-b is not deleted twice
    assert evictions.nominated == {"default/medium": "", "default/high": "n0"}
    gone(cluster, loop, clock, evictions.pods)
    assert "high" in _placed(cluster) and "medium" not in _placed(cluster)


def test_a_pod_that_no_longer_finds_victims_has_its_nomination_cleared() -> None:
    cluster, loop, clock, _, evictions = _loop(("n0", 1))
    _run(loop, clock, [_pod("low", 1, 0)])
    _run(loop, clock, [_pod("urgent", 1, 10)])
    assert evictions.nominated == {"default/urgent": "n0"}
    # Before the victim goes, a pod of the preemptor's own priority takes n0's room (bound by another scheduler).
    cluster.cache.remove_pod("default/low")
    loop.pod_gone("default/low")
    cluster.cache.upsert_pod(api_pod.parse_pod(objects.pod("squatter", extra={FOO: "1"}, node_name="n0")))
    clock.now += 30.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert evictions.nominated == {"default/urgent": ""}
    assert "urgent" not in _placed(cluster)


def test_an_unknown_preemption_policy_is_refused_naming_the_field() -> None:
    raw = objects.pod("odd")
    raw["spec"]["preemptionPolicy"] = "Sometimes"
    with pytest.raises(InvalidObject) as caught:
        api_pod.parse_pod(raw)
    assert caught.value.field == "spec.preemptionPolicy"
    assert api_pod.parse_pod(objects.pod("plain")).preemption_policy == "PreemptLowerPriority"


def test_a_nominated_node_goes_to_the_higher_priority_preemptor_first() -> None:
    # Two preemptors wait on n0; the lower one may not take the room the higher one waits for (kube-scheduler
    # counts a nominated pod against pods of its priority or lower), while the higher one ignores the lower one.
    cluster, loop, clock, _, _ = _loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_pod("victim", 1, 0, node="n0")])
    victim = [_pod("victim", 1, 0, node="n0")]
    loop.holds.nominate("default/medium", victim, 100)
    loop.holds.nominate("default/high", victim, 1000)
    loop.holds.nominate("default/peer", victim, 1000)
    n0 = cluster.cache.slot_of("n0")
    assert loop.holds.context("default/medium", priority=100).reserved[n0]
    # A peer of equal priority does not keep it off either.
    assert loop.holds.context("default/high", priority=1000) == EMPTY
    assert loop.holds.context("default/other", priority=0).reserved[n0]  # without a nomination: off every one


def test_a_victim_search_sees_held_nodes_as_the_job_s_cycles_will_once_it_holds_room() -> None:
    # n0 is held for a preemptor of priority 100, n1 for one of 1000. A job of priority 100 that evicts victims will
    # then share n0 (a hold of its priority) but still stay off n1: its search counts on n0 only what its own victims
    # free, and leaves n1 out; one of priority 1000 shares both.
    cluster, loop, clock, _, _ = _loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_pod("a", 1, 0, node="n0"), _pod("b", 1, 0, node="n1")])
    loop.holds.nominate("default/medium", [_pod("a", 1, 0, node="n0")], 100)
    loop.holds.nominate("default/high", [_pod("b", 1, 0, node="n1")], 1000)
    n0, n1 = cluster.cache.slot_of("n0"), cluster.cache.slot_of("n1")
    kept, shared = loop.holds.in_search("default/other", 100)
    assert kept is not None and shared is not None
    assert (kept[n1], shared[n0]) == (True, True) and not kept[n0] and not shared[n1]
    kept, shared = loop.holds.in_search("default/other", 1000)
    assert kept is None and shared is not None and shared[n0] and shared[n1]
    # Its own nomination is no hold at all.
    kept, shared = loop.holds.in_search("default/high", 1000)
    assert kept is None and shared is not None and shared[n0] and not shared[n1]


def test_a_preemptor_leaves_alone_a_node_nominated_for_one_of_its_priority() -> None:
    # kube-scheduler adds a nominated pod of the preemptor's priority or higher to its node before looking for
    # victims there. first's victim has gone from n0 before first is tried again: n0 has room for first, and for
    # second too if second evicted low-b; second evicts on n1 instead of taking the room first waits for.
    cluster, loop, clock, _, evictions = _loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_pod("low-a", 1, 0, node="n0"), _pod("low-b", 1, 0, node="n0")])
    _run(loop, clock, [_pod("low-c", 1, 0, node="n1"), _pod("low-d", 1, 0, node="n1")])
    _run(loop, clock, [_pod("first", 1, 10, node="n0")])
    assert len(evictions.pods) == 1 and evictions.nominated == {"default/first": "n0"}
    cluster.cache.remove_pod(evictions.pods[0].key)  # its deletion not yet heard by the loop
    _run(loop, clock, [_pod("second", 2, 10)])
    assert sorted(p.name for p in evictions.pods[1:]) == ["low-c", "low-d"]
    assert evictions.nominated["default/second"] == "n1"


def test_a_preemptor_whose_hold_was_dropped_counts_its_own_terminating_victims_again() -> None:
    cluster, loop, clock, _, evictions = _loop(("n0", 1))
    _run(loop, clock, [_pod("low", 1, 1)])
    _run(loop, clock, [_pod("medium", 1, 100)])
    assert evictions.nominated == {"default/medium": "n0"}
    loop.holds.release("default/medium")  # as when a pod of higher priority takes the node over
    clock.now += 30.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    # Its victim is still terminating: it waits for it again, without a second victim or a cleared nomination.
    assert [p.name for p in evictions.pods] == ["low"]
    assert evictions.nominated == {"default/medium": "n0"}
    gone(cluster, loop, clock, evictions.pods)
    assert _placed(cluster)["medium"] == "n0"


def test_a_gang_is_a_victim_whole_wherever_its_members_run() -> None:
    _, loop, clock, _, evictions = _loop(("n0", 2), ("n1", 2))
    loop.group_upsert(PodGroup("default", "g", min_member=2))
    for i in range(2):
        raw = objects.pod(f"g-{i}", extra={FOO: "2"}, labels={"gpusched.io/pod-group": "g"})
        loop.pod_pending(api_pod.parse_pod(raw))
    loop.run_until_idle()
    _run(loop, clock, [_pod("urgent", 2, 10)])
    assert sorted(p.name for p in evictions.pods) == ["g-0", "g-1"]
    assert evictions.nominated == {"default/urgent": "n0"}


def _bound(cluster: Cluster, loop: SchedulingLoop, name: str, foo: int, priority: int, node: str) -> None:
    """A pod the API server shows bound to ``node`` (by another scheduler: it need not fit our filters)."""
    raw = objects.pod(name, extra={FOO: str(foo)}, node_name=node)
    raw["spec"]["priority"] = priority
    pod = api_pod.parse_pod(raw)
    cluster.cache.upsert_pod(pod)
    loop.pod_placed(pod)


def _tried(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes preemption's what-ifs try the pod on (each on that node alone), in order."""
    tried: list[str] = []
    fits_on = cluster.scheduler.fits_on

    def counting(pod: api_pod.PodRequest, snapshot: Any, slot: int, *context: Any) -> bool:
        tried.append(str(snapshot.names[slot]))
        return fits_on(pod, snapshot, slot, *context)

    monkeypatch.setattr(cluster.scheduler, "fits_on", counting)
    return tried


def test_nodes_no_eviction_can_help_are_not_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    # kube-scheduler's PostFilter looks only at the nodes its filters refused for a reason an eviction may change:
    # a taint the pod does not tolerate stays whatever leaves the node.
    taint = [{"key": "team", "value": "a", "effect": "NoSchedule"}]
    cluster = Cluster(
        [
            objects.node("n0", extra={FOO: "1"}, taints=taint),
            objects.node("n1", extra={FOO: "1"}, taints=taint),
            objects.node("n2", extra={FOO: "1"}),
        ],
        ("fit",),
    )
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    evictions = Evictions()
    loop.evictor = evictions
    for n in range(3):
        _bound(cluster, loop, f"low-{n}", 1, 1, f"n{n}")
    tried = _tried(cluster, monkeypatch)
    _run(loop, clock, [_pod("urgent", 1, 10)])
    assert [p.name for p in evictions.pods] == ["low-2"]
    assert set(tried) == {"n2"}


def test_a_failed_search_is_remembered_for_pods_of_its_shape_until_the_cluster_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On n0 a victim of priority 1 and a pod of 100: a pod of 50 asking for all of n0 finds nothing, and so does
    # its twin without searching; a node that comes with a victim on it makes both search again.
    cluster, loop, clock, _, evictions = _loop(("n0", 2))
    _bound(cluster, loop, "low", 1, 1, "n0")
    _bound(cluster, loop, "high", 1, 100, "n0")
    searched: list[str] = []
    node_victims = node_preemption.node_victims

    def counting(scheduler: Any, pod: api_pod.PodRequest, **kwargs: Any) -> Any:
        searched.append(pod.name)
        return node_victims(scheduler, pod, **kwargs)

    monkeypatch.setattr(node_preemption, "node_victims", counting)
    _run(loop, clock, [_pod("twin-a", 2, 50)])
    _run(loop, clock, [_pod("twin-b", 2, 50)])
    _run(loop, clock, [_pod("other", 2, 60)])  # another priority: its own search
    assert searched == ["twin-a", "other"]
    assert evictions.pods == []
    cluster.cache.upsert_node(api_node.parse_node(objects.node("n1", extra={FOO: "2"})))
    _bound(cluster, loop, "low-n1", 2, 1, "n1")
    clock.now += 30.0
    loop.cluster_event("node added")
    loop.run_until_idle()
    assert [p.name for p in evictions.pods] == ["low-n1"]
    assert "twin-a" in searched[2:] or "twin-b" in searched[2:]


def test_a_gang_no_eviction_can_help_evicts_nothing_without_trying(monkeypatch: pytest.MonkeyPatch) -> None:
    # Victims of low priority on both nodes, but the gang's node selector matches neither node.
    _, loop, clock, _, evictions = _loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_pod("low-0", 2, 1, node="n0"), _pod("low-1", 2, 1, node="n1")])
    tries: list[int] = []

    class Counting:
        """The gang module as the victim search sees it, counting its what-ifs."""

        def __getattr__(self, name: str) -> Any:
            return getattr(gang, name)

        def what_if(self, *args: Any, **kwargs: Any) -> Any:
            tries.append(1)
            return gang.what_if(*args, **kwargs)

    monkeypatch.setattr(reclaim, "gang", Counting())
    loop.group_upsert(PodGroup("default", "g", min_member=2, priority=100))
    for i in range(2):
        raw = objects.pod(f"g-{i}", extra={FOO: "2"}, labels={"gpusched.io/pod-group": "g"})
        raw["spec"]["nodeSelector"] = {"pool": "nowhere"}
        loop.pod_pending(api_pod.parse_pod(raw))
    loop.run_until_idle()
    assert evictions.pods == []
    assert tries == []


def test_a_victim_whose_deletion_failed_frees_its_preemptor_to_search_again() -> None:
    # The API server refused the victim's deletion or did not answer in time: the preemptor no longer waits for
    # a room that is not coming. Its nomination is cleared, it is told why, and it searches again at once (here it
    # chooses the same victim, the only one); once that victim is gone it is placed.
    cluster, loop, clock, events, evictions = _loop(("n0", 1))
    _run(loop, clock, [_pod("low", 1, 0)])
    _run(loop, clock, [_pod("urgent", 1, 10)])
    assert [p.name for p in evictions.pods] == ["low"]
    clock.now += 1.0
    loop.run_until_idle()
    assert [p.name for p in evictions.pods] == ["low"]  # waiting for its victim: nothing evicted twice
    loop.eviction_failed("default/low", "Timeout: the server was too busy")
    assert "PreemptionFailed" in events.reasons("pod default/urgent")
    assert "default/low" in events.messages("pod default/urgent")[-1]
    assert evictions.nominated["default/urgent"] == ""
    loop.run_until_idle()
    assert [p.name for p in evictions.pods] == ["low", "low"]
    assert evictions.nominated["default/urgent"] == "n0"
    gone(cluster, loop, clock, [evictions.pods[0]])
    assert _placed(cluster)["urgent"] == "n0"


def test_a_failed_deletion_of_a_pod_nobody_waits_for_changes_nothing() -> None:
    cluster, loop, clock, events, evictions = _loop(("n0", 1))
    _run(loop, clock, [_pod("low", 1, 0)])
    loop.eviction_failed("default/low", "Forbidden")
    loop.run_until_idle()
    assert evictions.pods == [] and events.reasons("pod default/low") == ["Scheduled"]
    assert _placed(cluster) == {"low": "n0"}


def test_preemptors_of_equal_priority_do_not_take_each_others_freed_room() -> None:
    # PreemptionBasic in small. first and second (equal priority) each evict one pod, on n0 and n1. first's victim
    # goes first, and second is tried before first: kube-scheduler counts first (nominated to n0) on n0 when
    # second is filtered, so second waits for its own victim instead of taking first's room (first would then
    # evict a second pod, and second's freed room would go unused).
    cluster, loop, clock, _, evictions = _loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_pod("low-a", 1, 0, node="n0"), _pod("low-b", 1, 0, node="n0")])
    _run(loop, clock, [_pod("low-c", 1, 0, node="n1"), _pod("low-d", 1, 0, node="n1")])
    _run(loop, clock, [_pod("first", 1, 10)])
    _run(loop, clock, [_pod("second", 1, 10)])
    assert len(evictions.pods) == 2
    nodes = {evictions.nominated["default/first"], evictions.nominated["default/second"]}
    assert nodes == {"n0", "n1"}
    first_victim = evictions.pods[0]  # evicted for first, on its nominated node
    cluster.cache.remove_pod(first_victim.key)
    loop.pod_gone(first_victim.key)
    _run(loop, clock, [_pod("second", 1, 10, labels={"touched": "yes"})])  # an update: second is tried first
    assert "second" not in _placed(cluster)
    gone(cluster, loop, clock, evictions.pods[1:])
    assert len(evictions.pods) == 2  # the minimum: no preemptor evicted twice
    placed = _placed(cluster)
    assert (placed["first"], placed["second"]) == (
        evictions.nominated["default/first"],
        evictions.nominated["default/second"],
    )


def test_a_pod_of_equal_priority_fits_beside_a_nominated_pod_where_the_node_holds_both() -> None:
    # kube-scheduler adds the nominated pod's requests to its node, it does not hold the whole node: with big's
    # room freed for first (2 of the 3 it frees), a pod of first's priority asking 1 still fits on n0.
    cluster, loop, clock, _, evictions = _loop(("n0", 4))
    _run(loop, clock, [_pod("big", 3, 0), _pod("keeper", 1, 100)])
    _run(loop, clock, [_pod("first", 2, 10)])
    assert [p.name for p in evictions.pods] == ["big"]
    assert evictions.nominated == {"default/first": "n0"}
    cluster.cache.remove_pod("default/big")  # its deletion not yet heard by the loop
    _run(loop, clock, [_pod("beside", 2, 10)])  # first's 2 and beside's 2 do not fit beside keeper
    assert "beside" not in _placed(cluster) and len(evictions.pods) == 1
    _run(loop, clock, [_pod("small", 1, 10)])
    assert _placed(cluster)["small"] == "n0"
    gone(cluster, loop, clock, evictions.pods)
    assert _placed(cluster)["first"] == "n0"
    assert "beside" not in _placed(cluster) and len(evictions.pods) == 1


# --- nominated pods with GPUs and ResourceClaims, counted by their requests ------------------------------------


def _gpu_loop(*nodes: tuple[str, int]) -> tuple[Cluster, SchedulingLoop, Clock, Evictions]:
    """Nodes named and sized in whole GPUs (the device plugin's ``nvidia.com/gpu``)."""
    cluster = Cluster([objects.node(name, gpus=gpus) for name, gpus in nodes])
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    evictions = Evictions()
    loop.evictor = evictions
    return cluster, loop, clock, evictions


def _gpu_pod(
    name: str, priority: int, *, gpus: int = 0, milli: int | None = None, node: str = ""
) -> api_pod.PodRequest:
    raw = objects.pod(name, gpus=gpus, milli=milli, node_selector={"kubernetes.io/hostname": node} if node else None)
    raw["spec"]["priority"] = priority
    return api_pod.parse_pod(raw)


def test_preemptors_of_equal_priority_with_gpus_do_not_take_each_others_freed_room() -> None:
    # As with CPU requests above, with whole GPUs: first and second each evict a 1-GPU pod, each on its own node (of
    # one GPU). first's victim goes first and second is tried before first: first is counted on its node with the
    # GPU it will take there, so second waits for its own victim instead of taking first's GPU (first would then
    # evict another pod, and second's freed GPU would go unused).
    cluster, loop, clock, evictions = _gpu_loop(("n0", 1), ("n1", 1))
    _run(loop, clock, [_gpu_pod("low-a", 0, gpus=1, node="n0"), _gpu_pod("low-b", 0, gpus=1, node="n1")])
    _run(loop, clock, [_gpu_pod("first", 10, gpus=1)])
    _run(loop, clock, [_gpu_pod("second", 10, gpus=1)])
    assert [p.name for p in evictions.pods] == ["low-b", "low-a"]
    assert evictions.nominated == {"default/first": "n1", "default/second": "n0"}
    cluster.cache.remove_pod("default/low-b")
    loop.pod_gone("default/low-b")
    _run(loop, clock, [_gpu_pod("second", 10, gpus=1)])  # an update: second is tried first
    assert "second" not in _placed(cluster)
    gone(cluster, loop, clock, evictions.pods[1:])
    assert len(evictions.pods) == 2  # the minimum: no preemptor evicted twice
    placed = _placed(cluster)
    assert (placed["first"], placed["second"]) == ("n1", "n0")


def test_a_pod_of_equal_priority_fits_beside_a_nominated_pod_with_gpus_where_the_node_holds_both() -> None:
    # n0's 4 GPUs: big holds 3, keeper 1. first (2 GPUs) evicts big; once big is gone, first's 2 GPUs and keeper's
    # leave one: a 1-GPU pod of first's priority takes it, a 2-GPU one waits (and evicts nothing).
    cluster, loop, clock, evictions = _gpu_loop(("n0", 4))
    _run(loop, clock, [_gpu_pod("big", 0, gpus=3), _gpu_pod("keeper", 100, gpus=1)])
    _run(loop, clock, [_gpu_pod("first", 10, gpus=2)])
    assert [p.name for p in evictions.pods] == ["big"] and evictions.nominated == {"default/first": "n0"}
    cluster.cache.remove_pod("default/big")  # its deletion not yet heard by the loop
    _run(loop, clock, [_gpu_pod("beside", 10, gpus=2)])
    assert "beside" not in _placed(cluster) and len(evictions.pods) == 1
    _run(loop, clock, [_gpu_pod("small", 10, gpus=1)])
    assert _placed(cluster)["small"] == "n0"
    gone(cluster, loop, clock, evictions.pods)
    assert _placed(cluster)["first"] == "n0"
    assert "beside" not in _placed(cluster) and len(evictions.pods) == 1
    # Each took GPUs of its own.
    devices = {d.pod.name: set(d.gpu_ids) for d in cluster.binder.decisions}
    assert len(devices["first"]) == 2 and not devices["first"] & (devices["small"] | devices["keeper"])


def test_a_nominated_shared_gpu_pod_is_counted_with_its_share_as_its_latest_update_says() -> None:
    # One GPU: keeper 200 milli, low 800. first (300) evicts low, then its share is edited to 600 while low is still
    # there. Once low is gone, first's 600 and keeper's 200 leave 200: a pod of first's priority asking 300 (which
    # the old share would have left room for) waits, one asking 200 fits beside first.
    cluster, loop, clock, evictions = _gpu_loop(("n0", 1))
    _run(loop, clock, [_gpu_pod("keeper", 100, milli=200), _gpu_pod("low", 0, milli=800)])
    _run(loop, clock, [_gpu_pod("first", 10, milli=300)])
    assert [p.name for p in evictions.pods] == ["low"] and evictions.nominated == {"default/first": "n0"}
    _run(loop, clock, [_gpu_pod("first", 10, milli=600)])  # the update, while its victim is still there
    assert "first" not in _placed(cluster) and len(evictions.pods) == 1
    cluster.cache.remove_pod("default/low")  # its deletion not yet heard by the loop
    _run(loop, clock, [_gpu_pod("middle", 10, milli=300)])
    assert "middle" not in _placed(cluster) and len(evictions.pods) == 1
    _run(loop, clock, [_gpu_pod("tiny", 10, milli=200)])
    assert _placed(cluster)["tiny"] == "n0"
    gone(cluster, loop, clock, evictions.pods)
    assert _placed(cluster)["first"] == "n0" and "middle" not in _placed(cluster)
    assert cluster.free_devices("n0") == [0.0]


def test_a_nominated_pod_with_resource_claims_is_counted_with_the_devices_it_will_take() -> None:
    # The same with DRA: node a's 4 GPUs from its ResourceSlice, big's claim holds 3, keeper's 1. first's claim
    # asks 2 and evicts big; once big and its claim are gone, a pod of first's priority whose claim asks 1 takes
    # the GPU left, one asking 2 waits, and first gets two GPUs nobody else has.
    cluster = DraCluster(("a",), gpus=4)
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    evictions = Evictions()
    loop.evictor = evictions

    def claimed(name: str, priority: int, gpus: int) -> api_pod.PodRequest:
        cluster.claim(dra.claim(f"{name}-gpus", dra.request(count=gpus)))
        raw = pod_with(name, f"{name}-gpus")
        raw["spec"]["priority"] = priority
        return cluster.pod(raw)

    _run(loop, clock, [claimed("big", 0, 3), claimed("keeper", 100, 1)])
    for decision in cluster.binder.decisions:  # the claims' status, as the API server shows it once they are bound
        name, devices = decision.pod.name, [d.device for c in decision.claims for d in c.devices]
        allocation = dra.allocation("a", *devices)
        cluster.claim(
            dra.claim(f"{name}-gpus", dra.request(count=len(devices)), allocation=allocation, reserved_for=[name])
        )
    _run(loop, clock, [claimed("first", 10, 2)])
    assert [p.name for p in evictions.pods] == ["big"] and evictions.nominated == {"default/first": "a"}
    cluster.cache.remove_pod("default/big")  # its deletion not yet heard by the loop
    cluster.store.remove_claim("default/big-gpus")
    _run(loop, clock, [claimed("beside", 10, 2)])
    assert "beside" not in _placed(cluster) and len(evictions.pods) == 1
    _run(loop, clock, [claimed("small", 10, 1)])
    assert _placed(cluster)["small"] == "a"
    gone(cluster, loop, clock, evictions.pods)
    assert _placed(cluster)["first"] == "a" and "beside" not in _placed(cluster)
    devices = {d.pod.name: {x.device for c in d.claims for x in c.devices} for d in cluster.binder.decisions}
    assert len(devices["first"]) == 2 and not devices["first"] & (devices["small"] | devices["keeper"])


def test_a_gang_of_lower_priority_does_not_count_on_the_gpus_freed_for_a_nominated_pod() -> None:
    # first (2 GPUs, priority 100) evicts n1's two pods; once they are gone from the cache, n1's GPUs are first's. A
    # gang of priority 50 (two 1-GPU members) counts first there, in its cycles as in its victim search, so it evicts
    # n0's pods for itself instead of waiting for room that is not its own.
    cluster, loop, clock, evictions = _gpu_loop(("n0", 2), ("n1", 2))
    _run(loop, clock, [_gpu_pod("low-a", 0, gpus=1, node="n0"), _gpu_pod("low-b", 0, gpus=1, node="n0")])
    _run(loop, clock, [_gpu_pod("low-c", 0, gpus=1, node="n1"), _gpu_pod("low-d", 0, gpus=1, node="n1")])
    _run(loop, clock, [_gpu_pod("first", 100, gpus=2)])
    assert sorted(p.name for p in evictions.pods) == ["low-c", "low-d"]
    assert evictions.nominated == {"default/first": "n1"}
    for pod in evictions.pods:
        cluster.cache.remove_pod(pod.key)  # their deletion not yet heard by the loop
    loop.group_upsert(PodGroup("default", "g", min_member=2, priority=50))
    for i in range(2):
        raw = objects.pod(f"g-{i}", gpus=1, labels={"gpusched.io/pod-group": "g"})
        raw["spec"]["priority"] = 50
        loop.pod_pending(api_pod.parse_pod(raw))
    loop.run_until_idle()
    assert not {"g-0", "g-1"} & set(_placed(cluster))
    assert sorted(p.name for p in evictions.pods[2:]) == ["low-a", "low-b"]
    gone(cluster, loop, clock, evictions.pods)
    placed = _placed(cluster)
    assert (placed["first"], placed["g-0"], placed["g-1"]) == ("n1", "n0", "n0")


def test_a_nominated_pod_that_no_longer_fits_its_node_is_still_counted_there() -> None:
    # first is nominated to n0 for 2 GPUs, but keeper (of higher priority) holds one of them now: with its victims
    # gone first would not fit, yet it is counted there, on the GPUs with the most room, so a pod of lower priority
    # does not take n0's free GPU; one of higher priority than first's does not count it and takes the GPU.
    cluster, loop, clock, _ = _gpu_loop(("n0", 2))
    _run(loop, clock, [_gpu_pod("keeper", 1000, gpus=1)])
    loop.holds.nominate("default/first", [], 100, pod=_gpu_pod("first", 100, gpus=2), node="n0")
    _run(loop, clock, [_gpu_pod("low", 0, gpus=1)])
    assert "low" not in _placed(cluster)
    _run(loop, clock, [_gpu_pod("high", 500, gpus=1)])
    assert _placed(cluster)["high"] == "n0"
