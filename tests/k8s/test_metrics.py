"""Metrics as a Prometheus user reads them: base units, bounded labels, quota gauges, latency, process series."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import pytest

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import run
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
