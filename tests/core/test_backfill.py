"""The backfill action: the head of the line holds the node that frees soonest, and only work that is gone by its
expected start uses that room meanwhile (scheduler/core/actions/backfill.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec, QueueTree, parse_queue
from scheduler.api.objects import pod as api_pod
from scheduler.core import explanation
from scheduler.core.holds import Kind
from scheduler.core.loop import SchedulingLoop
from scheduler.framework import profile
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events


def _loop(
    actions: tuple[str, ...] = ("allocate", "backfill"), **backfill: Any
) -> tuple[Cluster, SchedulingLoop, Clock, Events]:
    config = profile.parse({"plugins": ["fit", "gpu", "binpack"], "actions": list(actions), "backfill": backfill})
    cluster = Cluster([objects.node(f"n{i}", cpu="64", gpus=8) for i in range(2)], config=config)
    clock, events = Clock(), Events()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    return cluster, loop, clock, events


def _pod(name: str, gpus: int, runtime: str | None = None, *, deadline: int | None = None) -> api_pod.PodRequest:
    raw = objects.pod(name, gpus=gpus, annotations={"gpusched.io/expected-runtime": runtime} if runtime else None)
    if deadline is not None:
        raw["spec"]["activeDeadlineSeconds"] = deadline
    return api_pod.parse_pod(raw)


_RUNTIME = {"gpusched.io/expected-runtime": "1h"}


def _where(cluster: Cluster) -> dict[str, str]:
    return {d.pod.name: d.node for d in cluster.binder.decisions}


def _finish(cluster: Cluster, loop: SchedulingLoop, *names: str) -> None:
    for name in names:
        cluster.cache.remove_pod(f"default/{name}")
        loop.pod_gone(f"default/{name}")
    loop.cluster_event("pod deleted")
    loop.run_until_idle()


def _busy(cluster: Cluster, loop: SchedulingLoop) -> None:
    """n0 runs a pod of 6 GPUs for 100s, n1 one of 8 GPUs for 1000s."""
    loop.pod_pending(_pod("short", 6, deadline=100))
    loop.run_until_idle()
    loop.pod_pending(_pod("long", 8, deadline=1000))
    loop.run_until_idle()
    assert _where(cluster) == {"short": "n0", "long": "n1"}


def test_the_head_of_the_line_holds_the_node_that_frees_soonest_and_is_told_when_it_starts() -> None:
    cluster, loop, clock, events = _loop()
    _busy(cluster, loop)
    clock.now = 10.0
    loop.pod_pending(_pod("big", 8, deadline=3600))
    loop.run_until_idle()
    hold = loop.holds.get(Kind.HEAD, "default/big")
    assert hold is not None and hold.expected_start == 100.0
    assert [cluster.cache.names[s] for s in hold.slots.nonzero()[0]] == ["n0"]
    assert "holding 8 GPUs on node n0 for this job; expected start in 90s" in events.messages("pod default/big")
    # Its FailedScheduling message (and so its PodScheduled condition) says so too.
    told = [m for o, r, m in events.seen if o == "pod default/big" and r == "FailedScheduling"]
    assert told and told[-1].endswith(". Holding 8 GPUs on node n0 for this job; expected start in 90s"), told
    clock.now = 100.0
    _finish(cluster, loop, "short")
    assert _where(cluster)["big"] == "n0"
    assert loop.holds.get(Kind.HEAD, "default/big") is None


def test_only_work_gone_by_the_expected_start_uses_held_room() -> None:
    cluster, loop, clock, _ = _loop()
    _busy(cluster, loop)
    loop.pod_pending(_pod("big", 8, deadline=3600))
    loop.run_until_idle()
    loop.pod_pending(_pod("quick", 2, deadline=60))  # ends at 60, before big's start at 100: backfills
    loop.pod_pending(_pod("slow", 2, deadline=500))  # would delay big
    loop.pod_pending(_pod("unknown", 2))  # declares no run time: never backfills
    loop.run_until_idle()
    assert _where(cluster) == {"short": "n0", "long": "n1", "quick": "n0"}
    clock.now = 100.0
    _finish(cluster, loop, "short", "quick")
    assert _where(cluster)["big"] == "n0"


def test_an_overrun_estimate_moves_the_expected_start_and_closes_the_held_room() -> None:
    cluster, loop, clock, _ = _loop()
    loop.pod_pending(_pod("short", 6, "100s"))  # a soft estimate: the pod may run longer
    loop.run_until_idle()
    loop.pod_pending(_pod("long", 8, deadline=1000))
    loop.run_until_idle()
    loop.pod_pending(_pod("big", 8, deadline=3600))
    loop.run_until_idle()
    hold = loop.holds.get(Kind.HEAD, "default/big")
    assert hold is not None and hold.expected_start == 100.0
    clock.now = 150.0  # "short" is still running
    loop.pod_pending(_pod("quick", 2, deadline=10))
    loop.run_until_idle()
    hold = loop.holds.get(Kind.HEAD, "default/big")
    assert hold is not None and hold.expected_start == 150.0
    assert "quick" not in _where(cluster)


def test_one_job_of_a_queue_holds_room_unless_the_profile_allows_more() -> None:
    for allowed, held in ((1, ["default/big0"]), (2, ["default/big0", "default/big1"])):
        cluster, loop, _, _ = _loop(heldJobsPerQueue=allowed)
        _busy(cluster, loop)
        loop.pod_pending(_pod("big0", 8, deadline=3600))
        loop.pod_pending(_pod("big1", 8, deadline=3600))
        loop.run_until_idle()
        assert [h.job for h in loop.holds.of_kind(Kind.HEAD)] == held


def test_a_job_holds_room_only_after_its_queue_s_wait() -> None:
    cluster, loop, clock, _ = _loop(holdAfterSeconds=600)
    loop.queues_changed([QueueSpec(name="default", hold_after_s=30.0)])
    _busy(cluster, loop)
    loop.pod_pending(_pod("big", 8, deadline=3600))
    loop.run_until_idle()
    assert loop.holds.get(Kind.HEAD, "default/big") is None
    clock.now = 40.0  # the Queue's 30s, not the profile's 600s
    loop.queue.move_all_to_active("tried again")
    loop.run_until_idle()
    assert loop.holds.get(Kind.HEAD, "default/big") is not None


def test_without_the_action_nothing_is_held() -> None:
    cluster, loop, _, _ = _loop(actions=("allocate", "reclaim", "preempt"))
    _busy(cluster, loop)
    loop.pod_pending(_pod("big", 8, deadline=3600))
    loop.pod_pending(_pod("quick", 2))
    loop.run_until_idle()
    assert not loop.holds.of_kind(Kind.HEAD)
    assert _where(cluster)["quick"] == "n0"


def test_the_profile_and_the_queue_refuse_bad_backfill_settings_naming_the_field() -> None:
    bad = [
        lambda: profile.parse({"plugins": ["fit"], "backfill": {"heldJobsPerQueue": 0}}),
        lambda: profile.parse({"plugins": ["fit"], "backfill": {"holdAfterSeconds": -1}}),
        lambda: parse_queue({"metadata": {"name": "q"}, "spec": {"backfill": {"holdAfterSeconds": "10m"}}}),
    ]
    fields = []
    for parse in bad:
        with pytest.raises(InvalidObject) as err:
            parse()
        fields.append(err.value.field)
    assert fields == ["backfill.heldJobsPerQueue", "backfill.holdAfterSeconds", "spec.backfill.holdAfterSeconds"]
    parent = parse_queue({"metadata": {"name": "org"}, "spec": {"backfill": {"holdAfterSeconds": 120}}})
    child = parse_queue({"metadata": {"name": "team"}, "spec": {"parent": "org"}})
    tree, problems = QueueTree.build([parent, child])
    assert not problems and tree.hold_after_s("team") == 120.0


def test_explain_tells_the_held_job_its_room_and_the_others_whether_they_may_use_it() -> None:
    cluster, loop, clock, _ = _loop()
    _busy(cluster, loop)
    big, quick, unknown = _pod("big", 8, deadline=3600), _pod("quick", 2, deadline=600), _pod("unknown", 2)
    loop.pod_pending(big)
    loop.run_until_idle()
    clock.now = 40.0
    live = explanation.Live(
        loop=loop,
        pending={p.key: p for p in (big, quick, unknown)},
        units=explanation.Units(amounts=lambda amounts: str(dict(amounts)), share=str),
    )
    assert "backfill: holding 8 GPUs on node n0 for this job; expected start in 60s" in explanation.explain_pod(
        live, big.key
    )
    said = explanation.explain_pod(live, quick.key)
    assert (
        "node n0 held for default/big, expected to start in 60s; this job may not use it: its run time ends later"
        in said
    )
    said = explanation.explain_pod(live, unknown.key)
    assert "this job may not use it: it declares no run time" in said


def test_a_gang_whose_members_are_all_deleted_holds_nothing_any_more() -> None:
    # Kueue evicts an admitted Job by suspending it: the Job controller deletes every pod, the PodGroup stays (the
    # Job owns it). The room held for the gang must go with its members, not wait for the hold to expire.
    cluster, loop, clock, _ = _loop()
    _busy(cluster, loop)
    clock.now = 10.0
    loop.group_upsert(PodGroup("default", "train", min_member=2))
    labels = {"gpusched.io/pod-group": "train"}
    members = [
        api_pod.parse_pod(objects.pod(f"train-{i}", gpus=4, labels=labels, annotations=_RUNTIME)) for i in range(2)
    ]
    for member in members:
        loop.pod_pending(member)
    loop.run_until_idle()
    gang = loop.jobs.gang_key("default/train")
    assert loop.holds.get(Kind.HEAD, gang) is not None
    for member in members:
        loop.pod_gone(member.key)
    assert loop.holds.get(Kind.HEAD, gang) is None
    assert not loop.holds.of_kind(Kind.HEAD)
