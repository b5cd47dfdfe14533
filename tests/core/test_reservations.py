"""Reservations in the loop: placed as their pods would be, their nodes kept from everyone but their owners, their
room counted in their queue, freed at their expiry or with their first user, and held again after a restart."""

from __future__ import annotations

import dataclasses
from typing import Any

from scheduler.api.crds import reservation as api_reservation
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.objects import pod as api_pod
from scheduler.core import explanation
from scheduler.core.loop import SchedulingLoop
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events
from tests.core.test_consolidate import World
from tests.core.test_explanation import UNITS
from tests.core.test_tenancy import Evictions

GPU = "nvidia.com/gpu"


def _loop(cluster: Cluster | None = None) -> tuple[Cluster, SchedulingLoop, Clock, Events]:
    if cluster is None:
        cluster = Cluster([objects.node(f"n{i}", cpu="64", gpus=8) for i in range(2)], ("fit", "gpu", "binpack"))
    clock = Clock()
    clock.now = 1000.0
    events = Events()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    return cluster, loop, clock, events


def _reservation(
    *, ttl: int | None = 600, allocate_once: bool = False, status: dict[str, Any] | None = None
) -> api_reservation.Reservation:
    spec: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: 8, "cpu": "1"}}}]}},
        "owners": [{"labelSelector": {"matchLabels": {"app": "train"}}}],
        "allocateOnce": allocate_once,
    }
    if ttl is not None:
        spec["ttlSeconds"] = ttl
    raw: dict[str, Any] = {
        "metadata": {"name": "big", "namespace": "default", "creationTimestamp": "1970-01-01T00:16:40Z"},
        "spec": spec,
    }
    if status is not None:
        raw["status"] = status
    return api_reservation.parse_reservation(raw)


def _upsert(loop: SchedulingLoop, reservation: api_reservation.Reservation) -> None:
    loop.reservation_upsert(reservation, api_reservation.ghosts(reservation))


def _pod(name: str, *, owner: bool = False, priority: int = 0) -> api_pod.PodRequest:
    raw = objects.pod(name, gpus=8, labels={"app": "train"} if owner else None)
    raw["spec"]["priority"] = priority
    return api_pod.parse_pod(raw)


def _placed(cluster: Cluster) -> dict[str, str]:
    return {d.pod.name: d.node for d in cluster.binder.decisions}


def _bound(loop: SchedulingLoop, cluster: Cluster, name: str) -> None:
    """The API server shows pod ``name`` bound where the loop placed it."""
    decision = next(d for d in cluster.binder.decisions if d.pod.name == name)
    loop.pod_placed(dataclasses.replace(decision.pod, node_name=decision.node, phase="Running"))


def _status(loop: SchedulingLoop) -> dict[str, Any]:
    status = loop.reservations.status("default/big")
    assert status is not None
    return status


def test_a_reservation_holds_a_node_that_others_never_get_and_its_owner_gets_at_once() -> None:
    cluster, loop, _, events = _loop()
    _upsert(loop, _reservation())
    status = _status(loop)
    assert status["phase"] == "Available"
    (held,) = status["nodes"]
    assert status["held"] == {GPU: 8.0, "cpu": 1000.0}  # scheduler units: milli-CPU
    assert events.reasons("reservation default/big") == ["Reserved"]
    # Counted in its queue from the moment it holds room.
    assert loop.held("default")[GPU] == 8.0
    for name in ("other", "late"):
        loop.pod_pending(_pod(name))
    loop.run_until_idle()
    placed = _placed(cluster)
    (first,) = placed  # one of the two, on the node not held
    assert placed[first] != held
    (waiting,) = {"other", "late"} - {first}
    (message,) = events.messages(f"pod default/{waiting}")
    assert "Reservation default/big" in message
    loop.pod_pending(_pod("train", owner=True))
    loop.run_until_idle()
    assert _placed(cluster)["train"] == held
    _bound(loop, cluster, "train")
    # The owner takes its ghost's place in the queue: 8 GPUs for the first pod, 8 for the owner, none for the ghost.
    _bound(loop, cluster, first)
    assert loop.held("default")[GPU] == 16.0
    assert _status(loop)["users"] == ["default/train"]


def test_its_expiry_frees_the_room_for_the_pod_that_waited() -> None:
    cluster, loop, clock, events = _loop()
    _upsert(loop, _reservation(ttl=60))
    (held,) = _status(loop)["nodes"]
    for name in ("a", "b"):
        loop.pod_pending(_pod(name))
    loop.run_until_idle()
    assert len(_placed(cluster)) == 1
    clock.now += 61
    loop.carry_out_moves()
    loop.run_until_idle()
    assert held in _placed(cluster).values() and len(_placed(cluster)) == 2
    status = _status(loop)
    assert (status["phase"], status["nodes"]) == ("Expired", [])
    assert events.reasons("reservation default/big") == ["Reserved", "Expired"]
    assert loop.held("default")[GPU] == 16.0  # the two pods, the ghost no more


def test_allocate_once_ends_with_its_first_user() -> None:
    cluster, loop, _, events = _loop()
    _upsert(loop, _reservation(allocate_once=True))
    loop.pod_pending(_pod("train", owner=True))
    loop.run_until_idle()
    _bound(loop, cluster, "train")
    assert _status(loop)["phase"] == "Succeeded"
    assert events.reasons("reservation default/big")[-1] == "Used"
    loop.pod_pending(_pod("other"))
    loop.run_until_idle()
    assert set(_placed(cluster)) == {"train", "other"}


def test_a_reservation_waits_for_room_and_says_why() -> None:
    cluster, loop, _, _ = _loop()
    for name in ("a", "b"):
        loop.pod_pending(_pod(name))
    loop.run_until_idle()
    _upsert(loop, _reservation())
    status = _status(loop)
    assert status["phase"] == "Pending"
    assert status["conditions"][0]["reason"] == "Unschedulable"
    cluster.cache.remove_pod("default/a")
    loop.pod_gone("default/a")
    loop.cluster_event("pod deleted")
    assert _status(loop)["phase"] == "Available"


def test_no_preemption_makes_room_on_a_reserved_node() -> None:
    cluster, loop, _, _ = _loop()
    _upsert(loop, _reservation(ttl=None))
    (held,) = _status(loop)["nodes"]
    loop.pod_pending(_pod("low"))
    loop.run_until_idle()
    _bound(loop, cluster, "low")
    evictions = Evictions()
    loop.evictor = evictions
    loop.pod_pending(_pod("high", priority=100))
    loop.run_until_idle()
    assert [pod.name for pod in evictions.pods] == ["low"]
    assert evictions.nominated == {"default/high": _placed(cluster)["low"]}
    assert "high" not in _placed(cluster)
    assert _status(loop)["nodes"] == [held]


def test_after_a_restart_an_available_reservation_is_held_again_on_its_nodes() -> None:
    cluster, loop, _, _ = _loop()
    _upsert(loop, _reservation(status={"phase": "Available", "nodes": ["n1"]}))
    assert _status(loop)["nodes"] == ["n1"]
    loop.pod_pending(_pod("other"))
    loop.run_until_idle()
    assert _placed(cluster) == {"other": "n0"}
    ended = _reservation(status={"phase": "Expired"})
    _, fresh, _, _ = _loop(cluster)
    _upsert(fresh, ended)
    assert _status(fresh)["phase"] == "Expired"
    assert not fresh.holds.holding


def test_a_deleted_or_unreadable_reservation_holds_nothing() -> None:
    _, loop, _, _ = _loop()
    _upsert(loop, _reservation())
    loop.reservation_removed("default/big")
    assert not loop.holds.holding
    assert loop.held("default").get(GPU, 0) == 0
    loop.reservation_failed("default/big", "field spec.replicas: 0 is not an integer from 1 to 10000")
    assert _status(loop)["phase"] == "Failed"
    assert not loop.holds.holding


def test_explain_tells_a_pod_whose_room_it_may_not_use_and_an_owner_where_it_goes() -> None:
    cluster, loop, _, _ = _loop()
    _upsert(loop, _reservation(ttl=60))
    (held,) = _status(loop)["nodes"]
    pods = [_pod("a"), _pod("b"), _pod("train", owner=True)]
    for pod in pods[:2]:
        loop.pod_pending(pod)
    loop.run_until_idle()
    (waiting,) = [p for p in pods[:2] if p.name not in _placed(cluster)]
    loop.pod_pending(pods[2])
    live = explanation.Live(loop=loop, pending={p.key: p for p in pods}, units=UNITS)
    told = explanation.explain_pod(live, waiting.key)
    assert f"Reservation default/big holds {held} for 60s more for the pods it names: not for this one" in told
    told = explanation.explain_pod(live, pods[2].key)
    assert f"named by Reservation default/big: it goes only into the room it holds on {held}" in told


def test_a_replica_that_placed_it_elsewhere_takes_the_nodes_the_leader_wrote() -> None:
    cluster, loop, _, _ = _loop()
    _upsert(loop, _reservation())
    (mine,) = _status(loop)["nodes"]
    (theirs,) = {"n0", "n1"} - {mine}
    _upsert(loop, _reservation(status={"phase": "Available", "nodes": [theirs]}))
    assert _status(loop)["nodes"] == [theirs]
    assert loop.held("default")[GPU] == 8.0  # counted once
    loop.pod_pending(_pod("other"))
    loop.run_until_idle()
    assert _placed(cluster) == {"other": mine}


def test_an_owner_preempts_only_inside_its_reservation() -> None:
    cluster, loop, _, _ = _loop()
    _upsert(loop, _reservation(ttl=None))
    (held,) = _status(loop)["nodes"]
    for pod in (_pod("first", owner=True), _pod("low")):
        loop.pod_pending(pod)
    loop.run_until_idle()
    assert _placed(cluster)["first"] == held and _placed(cluster)["low"] != held
    for name in ("first", "low"):
        _bound(loop, cluster, name)
    evictions = Evictions()
    loop.evictor = evictions
    loop.pod_pending(_pod("urgent", owner=True, priority=100))
    loop.run_until_idle()
    # Evicting "low" would free a node the owner may not use: its victim is the one inside the Reservation.
    assert [pod.name for pod in evictions.pods] == ["first"]


def test_a_standby_ends_it_when_the_leader_wrote_it_ended() -> None:
    _, loop, _, events = _loop()
    _upsert(loop, _reservation())
    _upsert(loop, _reservation(status={"phase": "Expired"}))
    assert _status(loop)["phase"] == "Expired"
    assert not loop.holds.holding and loop.held("default").get(GPU, 0) == 0
    assert events.reasons("reservation default/big") == ["Reserved"]  # the leader told it


def test_consolidation_moves_no_pod_onto_a_reserved_node() -> None:
    world = World(used=(7, 6, 7, 0))
    _upsert(world.loop, _reservation(ttl=None))
    assert _status(world.loop)["nodes"] == ["n3"]
    # 4 GPUs fit nowhere but on the held node: pods move away from another node to make room, none to n3.
    world.loop.pod_pending(world.pod("big", gpus=4))
    world.step()
    big = world.cluster.cache.pod("default/big")
    assert big is not None, world.events.seen
    assert big.pod.node_name != "n3" and world.made > 0
    assert [e.pod.key for e in world.cluster.cache.pods() if e.pod.node_name == "n3"] == []


def test_a_pod_named_as_the_reservation_is_not_its_owner() -> None:
    cluster, loop, _, _ = _loop()
    _upsert(loop, _reservation())
    (held,) = _status(loop)["nodes"]
    loop.pod_pending(_pod("big"))
    loop.run_until_idle()
    assert _placed(cluster)["big"] != held


def test_a_podgroup_owner_gang_is_placed_whole_into_the_room() -> None:
    cluster, loop, _, _ = _loop()
    raw = {
        "metadata": {"name": "big", "namespace": "default", "creationTimestamp": "1970-01-01T00:16:40Z"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: 4}}}]}},
            "replicas": 2,
            "owners": [{"podGroup": "g"}],
        },
    }
    reservation = api_reservation.parse_reservation(raw)
    _upsert(loop, reservation)
    (held,) = set(_status(loop)["nodes"])  # two replicas of 4 GPUs: one 8-GPU node, as a gang of them would go
    loop.pod_pending(_pod("other"))
    loop.run_until_idle()
    loop.group_upsert(PodGroup("default", "g", min_member=2))
    for i in range(2):
        loop.pod_pending(api_pod.parse_pod(objects.pod(f"g-{i}", gpus=4, labels={"gpusched.io/pod-group": "g"})))
    loop.run_until_idle()
    placed = _placed(cluster)
    assert placed["g-0"] == placed["g-1"] == held != placed["other"]
