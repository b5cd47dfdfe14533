"""Metrics as a Prometheus user reads them: base units, bounded labels, quota gauges, latency, process series."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import aiohttp
import pytest

from scheduler.core.extension_points import Framework
from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import run
from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import health
from scheduler.k8s.serve.metrics import STATE_GAUGES, Metrics
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
    assert 'gpusched_pending_gangs{queue="team-a"} 0.0' in lines  # every queue, 0 where nothing waits
    assert 'gpusched_binds_total{result="refused"} 0.0' in lines  # counters start at 0, not at their first event
    assert 'gpusched_invalid_objects_total{kind="queue"} 0.0' in lines
    assert not any("team-typo" in line for line in lines)
    assert 'gpusched_pending_jobs{state="unschedulable"} 1.0' in lines
    assert 'gpusched_cluster_gpus{state="free"} 6.0' in lines
    assert "gpusched_largest_free_gpu_block 6.0" in lines
    assert any(line.startswith("gpusched_scheduling_cycle_duration_seconds_count ") for line in lines)
    assert any(line.startswith("gpusched_plugin_duration_seconds_count{") for line in lines)
    assert any(line.startswith("process_resident_memory_bytes ") for line in lines)
    assert any(line.startswith("python_info{") for line in lines)


async def test_the_longest_wait_of_each_queue_counts_from_the_pods_creation(operator: Operator) -> None:
    operator.queue_event(QUEUE)
    operator.node_event(node("gpu-0", gpus=2))
    operator.pod_event(pod("fits", 2, labels={"gpusched.io/queue": "team-a"}))
    operator.pod_event(pod("waits", 4, labels={"gpusched.io/queue": "team-a"}))
    operator.listed()
    operator.loop.run_until_idle()
    created = 1795338000.0  # 2026-11-22T09:00:00Z, the pods' creationTimestamp
    operator.metrics.refresh_state(operator.loop, operator.pending, now=created + 1800)
    lines = operator.metrics.exposition().decode().splitlines()
    assert 'gpusched_pending_oldest_seconds{queue="team-a"} 1800.0' in lines
    assert not any(line.startswith('gpusched_pending_oldest_seconds{queue="default"}') for line in lines)


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
    assert 'gpusched_preemptions_total{queue="team-a",reason="priority"} 0.0' in text  # at 0 from the start
    assert 'gpusched_pending_pods{queue="team-a"} 0.0' in text.splitlines()  # every queue, 0 where nothing waits


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
        # A cycle not sampled calls the plugin itself, with no wrapper between (it pays nothing for the timing).
        assert (framework.filters[0] is probe) is not metrics.timing
        for _ in range(4):
            assert framework.filters[0].filter() is True
    assert probe.calls == 400
    assert low <= _timed_calls(metrics) <= high
    assert _timed_calls(metrics) % 4 == 0  # whole cycles


async def test_two_replicas_export_the_cluster_once_the_standby_none_of_the_state_gauges(client: k8s.Client) -> None:
    """Both replicas hold the same warm cache; summed over the Deployment, the GPUs count once (not 2x)."""
    replicas = [Operator(client, k8s_config.parse({}), identity=f"replica-{i}") for i in range(2)]
    leader, standby = replicas
    held = [True]
    leader.lease_held = lambda: held[0]
    for op in replicas:
        op.queue_event(QUEUE)
        op.node_event(node("gpu-0", gpus=8))
        op.node_event(node("gpu-1", gpus=4))
        op.pod_event(pod("a", 2, labels={"gpusched.io/queue": "team-a"}))
        op.listed()
    leader.set_leading(True)
    servers = [await health.serve(op, health_port=0, metrics_port=0, host="127.0.0.1") for op in replicas]
    try:
        texts = [await _get_metrics(s.metrics_port) for s in servers]
        totals = [_sample(text, 'gpusched_cluster_gpus{state="total"}') for text in texts]
        assert totals == [12.0, None]
        assert sum(t or 0 for t in totals) == 12.0
        assert _state_gauges(texts[0]) == list(STATE_GAUGES)
        assert _state_gauges(texts[1]) == []
        assert "gpusched_is_leader 0.0" in texts[1] and "gpusched_ready 1.0" in texts[1]
        # The lease thread sees the lease lost before the event loop hears of it: the next scrape has no gauge.
        held[0] = False
        lost = await _get_metrics(servers[0].metrics_port)
        assert _state_gauges(lost) == []
        held[0] = True
        leader.set_leading(False)
        standby.set_leading(True)
        texts = [await _get_metrics(s.metrics_port) for s in servers]
        assert [_sample(text, 'gpusched_cluster_gpus{state="total"}') for text in texts] == [None, 12.0]
    finally:
        for s in servers:
            await s.close()


async def _get_metrics(port: int) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        assert response.status == 200
        return await response.text()


def _state_gauges(text: str) -> list[str]:
    """The state gauges a scrape carries (a family with no series still has its TYPE line)."""
    return [name for name in STATE_GAUGES if f"# TYPE {name} gauge" in text]


def _sample(text: str, series: str) -> float | None:
    """The value of ``series`` (name and labels as exposed), None when the scrape does not carry it."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None
