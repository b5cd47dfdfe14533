"""The session's actions: the profile names them and their order, and only the actions named run."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.api import pod as api_pod
from scheduler.api.queue import QueueSpec
from scheduler.core import actions
from scheduler.core.loop import SchedulingLoop
from scheduler.framework import profile
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events


class Evictions:
    def __init__(self) -> None:
        self.pods: list[str] = []

    def evict(self, pods: list[api_pod.PodRequest], reason: str) -> None:
        self.pods.extend(p.name for p in pods)

    def nominate(self, pod: api_pod.PodRequest, node: str) -> None:
        pass


def _loop(names: list[str]) -> tuple[SchedulingLoop, Clock, Events, Evictions]:
    config = profile.parse({"plugins": ["fit", "gpu", "binpack"], "actions": names})
    cluster = Cluster([objects.node(f"n{i}", cpu="64", gpus=8) for i in range(2)], config=config)
    clock, events, evictions = Clock(), Events(), Evictions()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    loop.evictor = evictions
    loop.queues_changed([QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 8}), QueueSpec(name="batch")])
    # batch borrows the whole cluster: eight 2-GPU pods, the youngest last.
    for i in range(8):
        clock.now = float(i)
        loop.pod_pending(_pod(f"b{i}", "batch"))
        loop.run_until_idle()
    clock.now = 20.0
    return loop, clock, events, evictions


def _pod(name: str, queue: str, priority: int = 0) -> api_pod.PodRequest:
    pod = api_pod.parse_pod(objects.pod(name, gpus=2, labels={"gpusched.io/queue": queue}))
    return dataclasses.replace(pod, priority=priority)


def test_every_action_a_profile_may_name_is_built_in_the_profiles_order() -> None:
    loop, _, _, _ = _loop(list(profile.ACTIONS))
    assert [a.name for a in loop.actions] == list(profile.ACTIONS)
    assert [a.name for a in _loop(["allocate", "preempt"])[0].actions] == ["allocate", "preempt"]
    built = actions.build(
        profile.ACTIONS, scheduler=loop.scheduler, preemptor=loop.preemptor, tenancy=loop.tenancy, moves=loop.moves
    )
    assert [a.name for a in built] == list(profile.ACTIONS)


@pytest.mark.parametrize(
    ("names", "reclaimed", "preempted"),
    [
        (["allocate", "reclaim", "preempt"], ["b7"], ["b7"]),
        (["allocate", "reclaim"], ["b7"], []),
        (["allocate", "preempt"], [], ["b7"]),
        (["allocate"], [], []),
    ],
)
def test_only_the_actions_the_profile_names_make_room(
    names: list[str], reclaimed: list[str], preempted: list[str]
) -> None:
    # prod is within its guarantee and batch borrows: reclaim takes batch's youngest pod back.
    loop, _, events, evictions = _loop(names)
    loop.pod_pending(_pod("prod0", "prod"))
    loop.run_until_idle()
    assert evictions.pods == reclaimed
    assert ("Reclaiming" in events.reasons("pod default/prod0")) == bool(reclaimed)
    # urgent outranks batch's own pods: preempt evicts the youngest.
    loop, _, events, evictions = _loop(names)
    loop.pod_pending(_pod("urgent", "batch", priority=100))
    loop.run_until_idle()
    assert evictions.pods == preempted
    assert ("Preempting" in events.reasons("pod default/urgent")) == bool(preempted)
    # Whatever made room (or nothing), the failure tail ran once: one FailedScheduling, and it waits in the pool.
    assert events.reasons("pod default/urgent").count("FailedScheduling") == 1
    assert dict(loop.queue.pending()) == {"default/urgent": "unschedulable"}
