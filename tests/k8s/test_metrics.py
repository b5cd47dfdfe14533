"""Metrics as a Prometheus user reads them: base units, bounded labels, quota gauges, latency, process series."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import pytest

from scheduler.core.extension_points import Framework
from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import run
from scheduler.k8s.metrics import Metrics
from scheduler.k8s.operator import Operator
from tests.k8s.test_operator import node, pod

QUEUE = {
    "metadata": {"name": "team-a"},
    "spec": {"guaranteed": {"nvidia.com/gpu": "4", "cpu": "8"}, "limit": {"nvidia.com/gpu": "6"}},
}


@pytest.fixture
async def operator(client: k8s.Client) -> AsyncIterator[Operator]:
    op = Operator(client, k8s_config.parse({}), identity="m")
    await op.start()
    op.set_leading(True)
    yield op
    await op.close()


def scrape(op: Operator) -> list[str]:
    op.metrics.refresh_state(op.loop, op.pending, node_problems=op.cache.gpu_topology_problems)
    return op.metrics.exposition().decode().splitlines()


async def test_base_units_quotas_and_bounded_queue_labels(operator: Operator) -> None:
    operator.queue_event(QUEUE)
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("a", 2, cpu="2500m", labels={"gpusched.io/queue": "team-a"}))
    operator.pod_event(pod("typo", 1, labels={"gpusched.io/queue": "team-typo"}))
    operator.pod_event(pod("huge", 9))
    operator.listed()
    while operator.loop.run_once():
        pass
    lines = scrape(operator)
    assert 'gpusched_queue_allocated{queue="team-a",resource="cpu"} 2.5' in lines
    assert 'gpusched_queue_allocated{queue="team-a",resource="nvidia.com/gpu"} 2.0' in lines
    assert 'gpusched_queue_guaranteed{queue="team-a",resource="cpu"} 8.0' in lines
    assert 'gpusched_queue_limit{queue="team-a",resource="nvidia.com/gpu"} 6.0' in lines
    assert 'gpusched_pending_pods{queue="default"} 1.0' in lines
    assert not any("team-typo" in line for line in lines)
    assert 'gpusched_pending_jobs{state="unschedulable"} 1.0' in lines
    assert 'gpusched_cluster_gpus{state="free"} 6.0' in lines
    assert "gpusched_largest_free_gpu_block 6.0" in lines
    assert any(line.startswith("gpusched_scheduling_cycle_duration_seconds_count ") for line in lines)
    assert any(line.startswith("gpusched_plugin_duration_seconds_count{") for line in lines)
    assert any(line.startswith("process_resident_memory_bytes ") for line in lines)
    assert any(line.startswith("python_info{") for line in lines)


async def test_a_stranded_node_has_free_gpus_but_no_cpu(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("cpu-hog", 1, cpu="64"))
    operator.listed()
    operator.loop.run_until_idle()
    lines = scrape(operator)
    assert 'gpusched_cluster_nodes{state="stranded"} 1.0' in lines
    assert 'gpusched_cluster_nodes{state="idle"} 0.0' in lines


async def test_preemptions_by_reason_and_queue(operator: Operator) -> None:
    operator.queue_event(QUEUE)
    operator.listed()
    operator.metrics.refresh_state(operator.loop, operator.pending)
    operator.metrics.preempted("team-a", "preempted to give queue 'prod' its guarantee back (pod x)")
    operator.metrics.preempted("nope", "preempted by higher-priority work of queue 'team-a' (pod y)")
    text = operator.metrics.exposition().decode()
    assert 'gpusched_preemptions_total{queue="team-a",reason="reclaim"} 1.0' in text
    assert 'gpusched_preemptions_total{queue="unknown",reason="priority"} 1.0' in text


def test_bind_address_is_a_flag() -> None:
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    assert parser.parse_args([]).bind_address == "0.0.0.0"
    assert parser.parse_args(["--bind-address", "127.0.0.1"]).bind_address == "127.0.0.1"


class _Filter:
    name = "probe"

    def __init__(self) -> None:
        self.calls = 0

    def filter(self) -> bool:
        self.calls += 1
        return True


def _timed_calls(metrics: Metrics) -> float:
    count = metrics.registry.get_sample_value(
        "gpusched_plugin_duration_seconds_count", {"plugin": "probe", "extension_point": "filter"}
    )
    return count or 0.0


@pytest.mark.parametrize(("sample", "low", "high"), [(0.0, 0, 0), (1.0, 400, 400), (0.1, 20, 70)])
def test_plugin_calls_are_timed_in_the_sampled_cycles_only(sample: float, low: int, high: int) -> None:
    # As kube-scheduler samples its plugin metrics (one cycle in ten by default): every call of a sampled cycle
    # counts, no call of another, and every call reaches the plugin either way.
    metrics = Metrics(plugin_sample=sample, seed=7)
    probe = _Filter()
    framework = Framework(k8s_config.parse({}).profile, filters=[probe])
    metrics.instrument(framework)
    for _ in range(100):
        metrics.cycle_starts()
        for _ in range(4):
            assert framework.filters[0].filter() is True
    assert probe.calls == 400
    assert low <= _timed_calls(metrics) <= high
    assert _timed_calls(metrics) % 4 == 0  # whole cycles
