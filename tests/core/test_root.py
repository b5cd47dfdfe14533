"""The composition root (scheduler.core.root): one cluster's core put together from a profile and its ports."""

from __future__ import annotations

from scheduler.api.basics.resources import CPU, MEMORY, PODS, GpuRequest
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import PodRequest
from scheduler.core import root
from scheduler.framework import profile
from scheduler.framework.interface import Decision
from tests.core.harness import Clock, Events, RecordingBinder

NODES = [NodeInfo(name=f"node-{i}", allocatable={CPU: 8000, MEMORY: 64 * 2**30, PODS: 110}, gpus=4) for i in range(2)]


def _pod(name: str, gpus: int) -> PodRequest:
    return PodRequest(namespace="ns", name=name, resources={CPU: 100}, gpu=GpuRequest(count=gpus, milli=1000))


def test_a_pending_pod_is_bound_through_the_given_binder_on_the_given_nodes() -> None:
    binder = RecordingBinder()
    core = root.build(profile.load(), binder=binder, clock=Clock(), events=Events(), nodes=NODES)
    core.loop.pod_pending(_pod("a", 2))
    core.loop.run_until_idle()
    assert [(d.pod.name, d.node in {"node-0", "node-1"}) for d in binder.decisions] == [("a", True)]
    assert core.loop.scheduler is core.scheduler and core.scheduler.cache is core.cache


def test_the_framework_is_instrumented_before_the_scheduler_uses_it() -> None:
    seen: list[int] = []
    scheduler = root.build_scheduler(
        profile.load(), binder=RecordingBinder(), nodes=NODES, instrument=lambda f: seen.append(len(f.filters))
    )
    assert seen == [len(scheduler.framework.filters)]
    decision = scheduler.schedule(_pod("b", 1)).decision
    assert isinstance(decision, Decision)
