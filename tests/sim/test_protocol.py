"""The FGD evaluation protocol: the inflated workload keeps the trace and stops at the GPU demand asked for;
the allocation curve averages the samples at each percent of arrived demand."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from scheduler.sim import protocol
from scheduler.sim.trace import NodeSpec, PodSpec

CAPACITY = 8000.0  # e.g. 2 nodes x 4 GPUs

PODS = [
    PodSpec("cpu", 4000, 8192, 0, 0),
    PodSpec("share-250", 2000, 4096, 1, 250),
    PodSpec("share-500", 4000, 8192, 1, 500),
    PodSpec("whole", 8000, 16384, 1, 1000),
    PodSpec("pair", 16000, 32768, 2, 1000),
]  # 3750 GPU-milli in all


def _demand(pods: list[PodSpec]) -> int:
    return sum(p.gpu_total for p in pods)


@pytest.mark.parametrize("seed", [0, 1, 42])
def test_inflate_keeps_every_pod_and_stops_within_the_ratio(seed: int) -> None:
    workload = protocol.inflate(PODS, CAPACITY, 1.3, seed)
    counts = Counter(p.name for p in workload)
    assert set(counts) == {p.name for p in PODS}  # samples come from the trace only
    assert all(counts[p.name] >= 1 for p in PODS)
    target = 1.3 * CAPACITY  # 10400
    # Sampling stops at the first draw that would cross the target, so the room left is less than the largest
    # pod's demand (2000): 8400 < total <= 10400.
    assert target - max(p.gpu_total for p in PODS) < _demand(workload) <= target
    assert len(workload) > len(PODS)


def test_inflate_is_shuffled_deterministically_by_the_seed() -> None:
    first = protocol.inflate(PODS, CAPACITY, 1.3, 7)
    assert protocol.inflate(PODS, CAPACITY, 1.3, 7) == first
    others = [protocol.inflate(PODS, CAPACITY, 1.3, seed) for seed in range(8, 12)]
    assert all(other != first for other in others)
    assert [p.name for p in first[: len(PODS)]] != [p.name for p in PODS]  # the trace's pods are shuffled too


def test_inflate_puts_the_trace_first_and_the_samples_after_it() -> None:
    # As the authors' simulator does: the trace's pods shuffled, then the samples appended in the order drawn.
    workload = protocol.inflate(PODS, CAPACITY, 1.3, 5)
    assert sorted(p.name for p in workload[: len(PODS)]) == sorted(p.name for p in PODS)


def test_tie_order_renames_nodes_with_a_seeded_prefix() -> None:
    nodes = [NodeSpec(f"node-{i:02d}", 32000, 65536, 8, "V100") for i in range(12)]
    renamed = protocol.tie_order(nodes, 42)
    assert [n.name.split("-", 1)[1] for n in renamed] == [n.name for n in nodes]  # file order kept
    assert sorted(int(n.name.split("-", 1)[0]) for n in renamed) == list(range(12))  # a permutation
    assert [n.cpu_milli for n in renamed] == [n.cpu_milli for n in nodes]
    assert protocol.tie_order(nodes, 42) == renamed
    by_name = [n.name.split("-", 1)[1] for n in sorted(renamed, key=lambda n: n.name)]
    assert by_name != [n.name for n in nodes]  # ties no longer follow the file
    assert protocol.tie_order(nodes, 43) != renamed


def test_inflate_adds_nothing_when_the_trace_already_asks_for_more() -> None:
    workload = protocol.inflate(PODS, CAPACITY, 0.25, 3)  # 3750 > 0.25 x 8000
    assert sorted(p.name for p in workload) == sorted(p.name for p in PODS)


def test_inflate_of_a_workload_without_gpu_pods_ends() -> None:
    # No draw brings a CPU-only workload nearer the GPU target; this used to sample forever.
    cpu_only = [PodSpec("a", 1000, 1024, 0, 0), PodSpec("b", 2000, 1024, 0, 0)]
    assert sorted(p.name for p in protocol.inflate(cpu_only, CAPACITY, 1.3, 0)) == ["a", "b"]
    assert protocol.inflate([], CAPACITY, 1.3, 0) == []


def test_alloc_curve_averages_the_samples_at_each_percent_with_a_one_point_fallback() -> None:
    capacity = 1000.0
    # Per pod, the arrived and allocated GPU-milli so far: arrived 10%, 20%, 20.4%, 50%, 52%, 100%.
    arrived = np.array([100.0, 200.0, 204.0, 500.0, 520.0, 1000.0])
    allocated = np.array([100.0, 150.0, 170.0, 400.0, 410.0, 700.0])
    curve = protocol.alloc_curve(arrived, allocated, capacity, [10, 20, 21, 30, 51, 53, 100, 101, 130])
    assert curve == pytest.approx(
        {
            10: 10.0,
            20: 16.0,  # 20% and 20.4% round to 20: mean(15, 17)
            21: 16.0,  # nothing rounds to 21: the samples at 20 are within one point
            51: 40.5,  # nothing at 51: mean of the samples at 50 and 52, (40 + 41) / 2
            53: 41.0,  # nothing at 53: the sample at 52
            100: 70.0,
            101: 70.0,  # within one point of 100
            130: 70.0,  # past the last sample: where the curve ended
        }
    )
    assert 30 not in curve  # a gap inside the curve stays a gap


def test_alloc_curve_on_another_capacity_is_in_percent_of_it() -> None:
    capacity = 4000.0
    arrived = np.array([1000.0, 2000.0, 4000.0, 5200.0])  # 25, 50, 100, 130 %
    allocated = np.array([1000.0, 2000.0, 3500.0, 3900.0])  # 25, 50, 87.5, 97.5 %
    assert protocol.alloc_curve(arrived, allocated, capacity, [25, 100, 130]) == pytest.approx(
        {25: 25.0, 100: 87.5, 130: 97.5}
    )
