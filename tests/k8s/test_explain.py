"""`gpusched explain`: why a pod or a gang is pending, from the cluster's objects (served by the fake API)."""

from __future__ import annotations

import argparse

import pytest

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import explain
from tests.k8s.fakeapi import FakeApiServer
from tests.k8s.test_operator import node, pod, podgroup


async def run(fake: FakeApiServer, target: str, monkeypatch: pytest.MonkeyPatch) -> str:
    async def connect(settings: k8s.ClientSettings) -> k8s.Client:
        return k8s.for_host(fake.url, timeout=2.0)

    monkeypatch.setattr(k8s, "connect", connect)
    args = argparse.Namespace(target=target, namespace="default", kubeconfig=None, context=None, config=None)
    return await explain._explain(args, k8s_config.parse({}))


async def test_a_pod_too_big_for_any_node(fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.nodes = [node("gpu-0", gpus=8), node("gpu-1", gpus=8), node("cpu-0", gpus=0)]
    fake.pods = {
        "default/busy": pod("busy", 5, scheduler="default-scheduler", node_name="gpu-0"),
        "default/big": pod("big", 6),
    }
    text = await run(fake, "big", monkeypatch)
    assert "nodes: 1 of 3 pass every filter" in text
    assert "2 Insufficient nvidia.com/gpu: cpu-0, gpu-0" in text
    assert "the most free on one node: 8 (gpu-1)" in text
    assert "queue default: position 1 of 1" in text


async def test_a_gang_that_cannot_fit_together(fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.nodes = [node("gpu-0", gpus=4), node("gpu-1", gpus=4)]
    fake.pods = {f"default/job-{i}": pod(f"job-{i}", 4, labels={"gpusched.io/pod-group": "job"}) for i in range(3)}
    fake.custom["podgroups"] = [podgroup("job", 3)]
    text = await run(fake, "podgroup/job", monkeypatch)
    assert text.splitlines()[0] == "podgroup default/job: minMember 3, 3 pending and 0 placed members, queue default"
    assert "placing 3 members together now fails" in text
    assert fake.requests("POST", "/binding") == []
