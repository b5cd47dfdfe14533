"""`gpusched explain`: answered by the running scheduler from its live state (/explain), and the command asking it."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import pytest

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import explain, health
from scheduler.k8s.operator import Operator
from tests.k8s.test_operator import node, pod, podgroup

GROUP = {"gpusched.io/pod-group": "job"}


@pytest.fixture
async def operator(client: k8s.Client) -> AsyncIterator[Operator]:
    op = Operator(client, k8s_config.parse({}), identity="leader-0")
    await op.start()
    op.set_leading(True)
    yield op
    await op.close()


def tainted(name: str, gpus: int) -> dict[str, object]:
    body = node(name, gpus)
    body["spec"] = {"taints": [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]}
    return body


async def test_a_pod_too_big_names_only_nodes_it_may_use(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.node_event(node("gpu-1", gpus=4))
    operator.node_event(tainted("gpu-2", gpus=8))
    operator.pod_event(pod("busy", 5, scheduler="default-scheduler", node_name="gpu-0"))
    operator.pod_event(pod("big", 6, cpu="2500m"))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "big")
    assert "nodes: 0 of 3 pass every filter" in text
    assert "the most free on one node it may use (taints, selectors, cordons considered): 4 (gpu-1)" in text
    assert "gpu-2)" not in text.split("GPUs:")[1]
    assert "queue default: waiting for a change in the cluster" in text


async def test_a_gang_member_says_it_waits_for_its_gang(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.podgroup_event(podgroup("job", 3))
    for i in range(2):
        operator.pod_event(pod(f"job-{i}", 1, labels=GROUP))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "job-0")
    assert "member of gang default/job (minMember 3): 0 placed, 2 exist" in text
    assert "nodes: 1 of 1 pass every filter" in text
    group = explain.answer(operator, "podgroup/job")
    assert group.splitlines()[0].startswith("podgroup default/job: minMember 3, 2 pending and 0 placed members")
    assert "waiting for members: 2 of the 3 still needed exist" in group


async def test_a_gang_that_cannot_fit_together(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=4))
    operator.node_event(node("gpu-1", gpus=4))
    operator.podgroup_event(podgroup("job", 3))
    for i in range(3):
        operator.pod_event(pod(f"job-{i}", 4, labels=GROUP))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "podgroup/job")
    assert "placing 3 members together now fails" in text
    assert operator.cache.pod("default/job-0") is None  # the what-if left nothing behind


async def test_a_queue_in_kubernetes_units(operator: Operator) -> None:
    operator.queue_event(
        {"metadata": {"name": "team-a"}, "spec": {"guaranteed": {"nvidia.com/gpu": "4", "memory": "256Gi"}}}
    )
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("a", 2, cpu="2500m", labels={"gpusched.io/queue": "team-a"}))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "queue/team-a")
    assert "guarantee: memory 256Gi, nvidia.com/gpu 4; limit: none" in text
    assert "holds: cpu 2500m, nvidia.com/gpu 2" in text
    with pytest.raises(explain.NotFound):
        explain.answer(operator, "queue/nope")


async def test_the_endpoint_answers_from_the_leader_and_says_when_a_standby_is_asked(
    operator: Operator, capsys: pytest.CaptureFixture[str]
) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("big", 9))
    operator.listed()
    operator.loop.run_until_idle()
    servers = await health.serve(operator, health_port=0, metrics_port=0, host="127.0.0.1")
    url = f"http://127.0.0.1:{servers.health_port}"
    try:
        args = argparse.Namespace(target="big", namespace="default", url=url, timeout=5.0)
        code, text, _ = await explain._ask(args)
        assert code == 200 and text.startswith("pod default/big")
        code, text, _ = await explain._ask(argparse.Namespace(target="ghost", namespace="x", url=url, timeout=5.0))
        assert code == 404 and "not a pending pod" in text
        operator.set_leading(False)
        code, text, _ = await explain._ask(args)
        assert code == 503 and "standby" in text
    finally:
        await servers.close()
