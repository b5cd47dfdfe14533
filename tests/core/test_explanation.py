"""The core's explanation (``gpusched explain`` without HTTP or Kubernetes): what it tells of a pod, a gang and a queue
is what the session's next cycle does with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import pod as api_pod
from scheduler.core import explanation
from scheduler.core.loop import SchedulingLoop
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events
from tests.core.test_segment_replacement import _member, _placed

GROUP = {"gpusched.io/pod-group": "job"}


def _amounts(vector: Mapping[str, float]) -> str:
    return ", ".join(f"{name} {amount:g}" for name, amount in sorted(vector.items()) if amount) or "nothing"


#: The core's own units (CPU in milli-cores, GPUs in GPUs), as a simulator would write them.
UNITS = explanation.Units(amounts=_amounts, share=lambda value: f"{value:.2f}")


def _loop(nodes: Sequence[dict[str, object]], plugins: Sequence[object] = ("fit", "gpu")) -> SchedulingLoop:
    cluster = Cluster(nodes, plugins)
    clock = Clock()
    return SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())


def _live(loop: SchedulingLoop, pods: Sequence[api_pod.PodRequest]) -> explanation.Live:
    return explanation.Live(loop=loop, pending={p.key: p for p in pods}, units=UNITS)


def _gang(loop: SchedulingLoop, name: str, members: int, gpus: int) -> list[api_pod.PodRequest]:
    loop.group_upsert(PodGroup("default", name, min_member=members))
    labels = {"gpusched.io/pod-group": name}
    pods = [api_pod.parse_pod(objects.pod(f"{name}-{i}", gpus=gpus, labels=labels)) for i in range(members)]
    for pod in pods:
        loop.pod_pending(pod)
    return pods


def test_a_pod_too_big_is_told_node_by_node_and_what_would_let_it_fit() -> None:
    taint = {"key": "maintenance", "value": "yes", "effect": "NoSchedule"}
    loop = _loop([objects.node("a", gpus=4), objects.node("b", gpus=8, taints=[taint])])
    big = api_pod.parse_pod(objects.pod("big", gpus=6))
    loop.pod_pending(big)
    loop.run_until_idle()
    lines = explanation.explain_pod(_live(loop, [big]), big.key).splitlines()
    assert lines[:4] == [
        "pod default/big",
        "  nodes: 0 of 2 pass every filter",
        "    1 Insufficient nvidia.com/gpu: a",
        "    1 node(s) had untolerated taint {maintenance: yes}: b",
    ]
    assert "it fits there once it tolerates maintenance=yes:NoSchedule" in lines[4]
    assert lines[5].startswith("  queue default: waiting for a change in the cluster that may let it fit")
    assert "the queue holds nothing; share beyond guarantee over weight 0.00" in lines[5]


def test_a_gang_is_told_what_its_next_cycle_does() -> None:
    """Before its cycle, a gang that fits is told where; the cycle places it there. A gang that does not fit is told
    why in the words its cycle then puts on its Scheduled condition."""
    loop = _loop([objects.node("a", gpus=4), objects.node("b", gpus=4)], ("fit", "gpu", "gang"))
    fits = _gang(loop, "fits", 2, 3)
    told = explanation.explain_group(_live(loop, fits), "default/fits")
    assert "a placement exists now for 2 members (on a, b): the gang waits its turn in the queue" in told
    loop.run_until_idle()
    placed = loop.gang("default/fits")
    assert placed is not None and set(placed.placed) == {p.key for p in fits}
    waits = _gang(loop, "waits", 2, 2)
    told = explanation.explain_group(_live(loop, waits), "default/waits")
    failing = next(line for line in told.splitlines() if line.startswith("  placing"))
    loop.run_until_idle()
    state = loop.gang("default/waits")
    assert state is not None and not state.placed
    assert failing == f"  placing 2 members together now fails: {state.conditions['Scheduled'].message}"
    member = explanation.explain_pod(_live(loop, waits), "default/waits-0")
    assert "member of gang default/waits (minMember 2): 0 placed, 2 exist" in member


def test_a_member_made_again_is_told_the_segment_that_holds_it_and_goes_there() -> None:
    """Segments of 2 members required in one clique: a member lost and made again may use only its segment's
    clique, and says so before its cycle places it there."""
    cluster, loop, _, first = _placed([("x", 12, "X"), ("y", 12, "Y")])
    cluster.cache.remove_pod("default/g-1")
    loop.pod_gone("default/g-1")
    again = _member(1)
    loop.pod_pending(again)
    told = explanation.explain_pod(_live(loop, [again]), again.key)
    assert f"the other members of its segment run on {first['g-0']}, so it may use only clique X" in told
    assert "nodes: 1 of 2 pass every filter" in told
    loop.run_until_idle()
    assert cluster.binder.decisions[-1].pod.key == again.key
    assert cluster.binder.decisions[-1].node == first["g-0"]


def test_a_queue_is_told_in_the_callers_units_and_unknown_names_are_not_found() -> None:
    loop = _loop([objects.node("a", gpus=8)])
    loop.queues_changed([QueueSpec(name="team-a", guaranteed={"nvidia.com/gpu": 4})])
    pod = api_pod.parse_pod(objects.pod("a", gpus=2, labels={"gpusched.io/queue": "team-a"}))
    loop.pod_pending(pod)
    loop.run_until_idle()
    live = explanation.Live(loop=loop, pending={}, units=UNITS, queue_problems={"odd": "it is odd"})
    text = explanation.explain_queue(live, "team-a").splitlines()
    assert text[1] == "  guarantee: nvidia.com/gpu 4; limit: none"
    assert text[2] == "  holds: cpu 1000, nvidia.com/gpu 2; borrowed: nothing"
    assert explanation.explain_queue(live, "odd") == "queue odd: not in use: it is odd"
    with pytest.raises(explanation.NotFound):
        explanation.explain_queue(live, "nope")
    with pytest.raises(explanation.NotFound):
        explanation.explain_pod(live, "default/ghost")
    assert explanation.explain_pod(live, pod.key) == "pod default/a\n  on node a: not pending"
