"""Replaying a trace in time: pods arrive at their creation time, a pod that fits nowhere waits until another
leaves, and the GPU allocation is weighted by how long it lasts."""

from __future__ import annotations

import math

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import typical
from scheduler.sim import policies, replay
from scheduler.sim.trace import NodeSpec, PodSpec

ONE_GPU = [NodeSpec("n", 8000, 16384, 1, "T4")]  # 1000 GPU-milli


def _replay(pods: list[PodSpec], policy: str = "bestfit") -> replay.ReplayRun:
    shapes = typical.typical_shapes([p.shape for p in pods])
    return replay.run_replay(ONE_GPU, pods, policies.build(policy, shapes=shapes, seed=0))


# first:  created 0, scheduled 0, deleted 100: runs 0..100.
# second: created 10, never scheduled in the trace, deleted 60: runs 50 s, from whenever it is placed.
# cpu:    created 200, no GPU, never deleted: the last arrival ends the replay's span (0..200).
PODS = [
    PodSpec("first", 1000, 1024, 1, 1000, (), creation=0.0, deletion=100.0, scheduled=0.0),
    PodSpec("second", 1000, 1024, 1, 1000, (), creation=10.0, deletion=60.0),
    PodSpec("cpu", 1000, 1024, 0, 0, (), creation=200.0),
]


@pytest.mark.parametrize("policy", ["bestfit", "fgd", "random"])
def test_a_pod_that_does_not_fit_waits_until_another_leaves(policy: str) -> None:
    run = _replay(PODS, policy)
    assert (run.placed_pods, run.failed_pods) == (3, 0)
    # second waits from 10 until first leaves at 100: 90 s; the others wait 0.
    assert run.pending_mean_s == pytest.approx(90 / 3)
    assert run.pending_p99_s == pytest.approx(0.98 * 90)  # linear interpolation in [0, 0, 90] at 99%
    # The GPU is full from 0 to 100 (first) and 100 to 150 (second), empty from 150 to 200: 150 / 200.
    assert run.time_weighted_alloc == pytest.approx(75.0)
    assert run.decisions == 4  # first, second (no room), cpu, second again when first leaves


def test_the_allocation_samples_follow_the_gpu_over_time() -> None:
    run = _replay(PODS)
    samples = dict(zip(run.times.tolist(), run.alloc_pct.tolist(), strict=True))
    assert samples[0.0] == 100.0
    assert samples[150.0] == 0.0  # second left
    assert samples[200.0] == 0.0
    assert run.times.tolist() == sorted(run.times.tolist())


def test_a_pod_that_never_finds_room_is_counted_as_never_placed() -> None:
    pods = [
        PodSpec("forever", 1000, 1024, 1, 1000, (), creation=0.0),
        PodSpec("starved", 1000, 1024, 1, 500, (), creation=5.0, deletion=10.0),
        PodSpec("late", 1000, 1024, 0, 0, (), creation=40.0),
    ]
    run = _replay(pods)
    assert (run.placed_pods, run.failed_pods) == (2, 1)
    assert run.pending_mean_s == 0.0
    assert run.time_weighted_alloc == pytest.approx(100.0)  # forever holds the whole GPU from 0 to 40


def test_pods_leaving_at_an_arrival_make_room_for_it() -> None:
    pods = [
        PodSpec("old", 1000, 1024, 1, 1000, (), creation=0.0, deletion=30.0, scheduled=0.0),
        PodSpec("new", 1000, 1024, 1, 1000, (), creation=30.0, deletion=90.0, scheduled=30.0),
        PodSpec("end", 1000, 1024, 0, 0, (), creation=60.0),
    ]
    run = _replay(pods)
    assert run.failed_pods == 0
    assert run.pending_mean_s == 0.0  # departures come first at the same time
    assert run.time_weighted_alloc == pytest.approx(100.0)


def test_a_pod_without_creation_time_is_refused_naming_it() -> None:
    pods = [PODS[0], PodSpec("timeless", 1000, 1024, 1, 500)]
    with pytest.raises(InvalidObject) as caught:
        _replay(pods)
    assert caught.value.obj == "pod timeless (row 2)"
    assert caught.value.field == "creation_time"


def test_nothing_placed_leaves_no_pending_figures() -> None:
    run = _replay(
        [PodSpec("huge", 1000, 1024, 2, 1000, (), creation=0.0), PodSpec("x", 1, 1, 2, 1000, (), creation=1.0)]
    )
    assert run.failed_pods == 2
    assert math.isnan(run.pending_mean_s) and math.isnan(run.pending_p99_s)
    assert run.time_weighted_alloc == 0.0
