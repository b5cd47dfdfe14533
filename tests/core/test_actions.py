"""The session's actions: the profile names them and their order, and only the actions named run."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Snapshot
from scheduler.core import root
from scheduler.core.actions import Action, Outcome, Setting, Verdict, registry
from scheduler.core.jobs import Attempt
from scheduler.core.loop import SchedulingLoop
from scheduler.core.statement import Statement
from scheduler.framework import profile
from scheduler.framework.interface import Decision
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events, RecordingBinder


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
    loop, _, _, _ = _loop(list(registry.ACTIONS))
    assert [a.name for a in loop.actions] == list(registry.ACTIONS)
    assert [a.name for a in _loop(["allocate", "preempt"])[0].actions] == ["allocate", "preempt"]
    # reclaim and preempt share the preemptor's state: the loop tells it what happens once.
    assert [type(state).__name__ for state in loop.states] == ["Moves", "Defragmenter", "Preemptor"]


@pytest.mark.parametrize(
    ("names", "field", "message"),
    [
        (["allocate", "defrag"], "actions[1]", r"unknown action 'defrag' \(known: allocate, consolidate"),
        (["allocate", "backfill", "preempt"], "actions[2]", "'preempt' cannot run after 'backfill'"),
        (["reclaim", "allocate"], "actions[0]", "the first action must be 'allocate'"),
        (["allocate", "reclaim", "consolidate"], "actions[2]", "'consolidate' cannot run after 'reclaim'"),
        (["allocate", "preempt", "reclaim"], "actions[2]", "least disruptive first"),
    ],
)
def test_a_profile_naming_actions_the_core_does_not_know_or_out_of_order_is_refused_when_built(
    names: list[str], field: str, message: str
) -> None:
    config = profile.parse({"plugins": ["fit"], "actions": names})
    with pytest.raises(InvalidObject, match=message) as err:
        root.build(config, binder=RecordingBinder(), clock=Clock(), events=Events())
    assert err.value.field == field and err.value.obj == "profile gpusched"


class _Decides(Action):
    """An action of a test, registered after allocate: it records placing the pod on n0, and says ``verdict``."""

    name = "decides"

    def __init__(self, setting: Setting, verdict: Verdict) -> None:
        self.scheduler, self.verdict = setting.scheduler, verdict

    def run(self, attempt: Attempt, snapshot: Snapshot, statement: Statement) -> Outcome:
        pod = attempt.members[0]
        statement.place([Decision(pod, "n0", ())])
        return Outcome(self.verdict)


@pytest.mark.parametrize(("verdict", "bound"), [(Verdict.NOTHING, []), (Verdict.WAITS, ["default/big"])])
def test_a_registered_action_is_run_and_what_it_decides_happens_only_if_it_places_or_makes_room(
    monkeypatch: pytest.MonkeyPatch, verdict: Verdict, bound: list[str]
) -> None:
    monkeypatch.setitem(registry.ACTIONS, "decides", lambda setting: _Decides(setting, verdict))
    loop, _, events, _ = _loop(["allocate", "decides"])
    binder = loop.scheduler.binder
    assert isinstance(binder, RecordingBinder)
    before = len(binder.decisions)
    loop.pod_pending(_pod("big", "prod", priority=100))
    loop.run_until_idle()
    after = [d.pod.key for d in binder.decisions[before:]]
    assert after == bound  # a statement discarded binds nothing; one committed binds what it placed
    assert (loop.scheduler.cache.pod("default/big") is not None) == bool(bound)
    assert events.reasons("pod default/big").count("FailedScheduling") == 1


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
