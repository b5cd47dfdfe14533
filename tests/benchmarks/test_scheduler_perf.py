"""benchmarks/scheduler_perf.py: the suite's workloads chosen as documented, throughput sampled as the suite does."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scheduler_perf as perf


def test_steady_binds_sample_at_their_rate() -> None:
    # 10 pods a second for 5 s: the tick at 1 s only starts the count, those at 2, 3 and 4 s sample 10 pods/s
    # each; the last bind comes before the tick at 5 s, when the suite has stopped collecting.
    binds = [0.05 + i / 10 for i in range(50)]
    average, samples = perf.sampled_throughput(0.0, binds)
    assert samples == 3
    assert average == pytest.approx(10.0)


def test_a_second_with_no_bind_is_folded_into_the_next_sample() -> None:
    # 10 bound by 1 s, 10 more by 2 s, none until 3.5 s, then 20 (and 10 at 4.5 s): the tick at 3 s records
    # nothing, the tick at 4 s records 20 pods over 2 s twice (once per second elapsed).
    binds = [0.5] * 10 + [1.5] * 10 + [3.5] * 20 + [4.5] * 10
    average, samples = perf.sampled_throughput(0.0, binds)
    assert samples == 3
    assert average == pytest.approx((10 + 10 + 10) / 3)


def test_too_short_to_sample() -> None:
    assert perf.sampled_throughput(0.0, [0.2, 0.4]) == (None, 0)
    assert perf.sampled_throughput(0.0, []) == (None, 0)


@pytest.fixture(scope="module")
def cases() -> dict[str, object]:
    try:
        return perf.load_cases(perf.suite_dir(None))
    except perf.SuiteError as exc:
        pytest.skip(str(exc))


def test_mid_size_takes_the_smallest_workload_of_100_to_1000_nodes(cases: dict[str, object]) -> None:
    assert perf.select(cases, "SchedulingBasic", "mid", 1.0).name == "500Nodes"
    assert perf.select(cases, "PreemptionBasic", "mid", 1.0).name == "1000Nodes"
    assert perf.select(cases, "SchedulingWithResourceClaimTemplate", "mid", 1.0).name == "2000pods_100nodes"
    assert perf.select(cases, "SchedulingBasic", "short", 1.0).params["initNodes"] == 5
    with pytest.raises(perf.SuiteError, match="no workload of size mid"):
        perf.select(cases, "SchedulingDaemonset", "mid", 1.0)  # 5 nodes or 15000


def test_scale_multiplies_the_counts_of_nodes_and_pods(cases: dict[str, object]) -> None:
    half = perf.select(cases, "Unschedulable", "mid", 0.5)
    assert half.name == "500Nodes/10Init/1kPods"
    assert dict(half.params) == {"initNodes": 250, "initPods": 5, "measurePods": 500}
    dra = perf.select(cases, "SchedulingWithResourceClaimTemplate", "mid", 0.5)
    assert dict(dra.params) == {
        "nodesWithDRA": 50,
        "nodesWithoutDRA": 0,
        "initPods": 500,
        "measurePods": 500,
        "maxClaimsPerNode": 20,  # a node's devices: not a count of objects
    }


def test_a_case_with_ops_not_played_is_refused_naming_them(cases: dict[str, object]) -> None:
    with pytest.raises(perf.SuiteError, match="barrier, deletePods"):
        perf.select(cases, "SchedulingWhileGated", "mid", 1.0)
    with pytest.raises(perf.SuiteError, match="no test case Nope"):
        perf.select(cases, "Nope", "mid", 1.0)


def test_a_missing_suite_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(perf.SuiteError, match="scheduler_perf suite is not at"):
        perf.suite_dir(tmp_path)
