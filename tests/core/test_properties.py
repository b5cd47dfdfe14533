"""Scheduling through the core never over-commits a node, and a pod is refused only when no node can hold it,
whatever the cluster, the profile, and the order of decisions, binding outcomes and deletions."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache
from scheduler.framework.interface import Code
from scheduler.kernels import layout
from tests.api import objects
from tests.core.harness import Cluster

PROFILES: tuple[list[Any], ...] = (
    ["fit", "gpu", "fgd"],
    ["fit", {"name": "gpu", "args": {"device": "random", "seed": 3}}, "binpack"],
    ["fit", {"name": "gpu", "args": {"device": "first"}}, "spread", "scarce_avoidance"],
    ["fit", {"name": "gpu", "args": {"device": "bestfit"}}, "balance", "resource_strategy"],
    ["fit", "gpu", "bestfit", "dotprod"],
)

NODE = st.fixed_dictionaries(
    {
        "cpu": st.sampled_from(["2", "4", "16"]),
        "memory": st.sampled_from(["4Gi", "16Gi"]),
        "pods": st.sampled_from(["3", "110"]),
        "gpus": st.sampled_from([0, 1, 2, 4]),
        "gpu_memory_mib": st.sampled_from([None, "8192", "16384"]),
        "extra": st.sampled_from([{}, {"rdma/hca": "1"}]),
    }
)
POD = st.one_of(
    st.fixed_dictionaries({"cpu": st.sampled_from(["100m", "1", "3"]), "memory": st.sampled_from(["512Mi", "4Gi"])}),
    st.fixed_dictionaries({"cpu": st.sampled_from(["500m", "2"]), "gpus": st.integers(min_value=1, max_value=4)}),
    st.fixed_dictionaries(
        {
            "cpu": st.sampled_from(["100m", "1"]),
            "milli": st.sampled_from([100, 250, 500, 900]),
            "gpu_memory": st.sampled_from([None, "2Gi", "6Gi"]),
        }
    ),
    st.fixed_dictionaries({"cpu": st.just("1"), "extra": st.just({"rdma/hca": "1"})}),
)
STEP = st.one_of(
    st.tuples(st.just("schedule"), POD),
    st.tuples(st.just("bound"), st.integers(min_value=0, max_value=30)),
    st.tuples(st.just("bind_failed"), st.integers(min_value=0, max_value=30)),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=30)),
)


def _fits_somewhere(cache: Cache, pod: api_pod.PodRequest) -> bool:
    """Whether some node can hold the pod, checked the slow and obvious way."""
    a = cache.arrays
    for slot in cache.nodes:
        if a.base_reason[slot] != layout.FIT:
            continue
        room = all(
            a.used[slot, cache.columns.index(name)] + amount <= a.cap[slot, cache.columns.index(name)]
            for name, amount in pod.resources.items()
            if name in cache.columns
        ) and all(name in cache.columns for name in pod.resources)
        count = int(a.gpu_count[slot])
        free, memory = a.gpu_free[slot, :count], a.gpu_mem_free[slot, :count]
        gpu = pod.gpu
        if gpu.whole:
            room = room and int((free >= 1000).sum()) >= gpu.count
        elif gpu.shared:
            room = room and bool(((free >= gpu.milli) & ((gpu.memory == 0) | (memory >= gpu.memory))).any())
        if room:
            return True
    return False


def _assert_not_overcommitted(cache: Cache) -> None:
    a = cache.arrays
    for slot in cache.nodes:
        assert (a.used[slot] <= a.cap[slot] + 1e-6).all(), (cache.names[slot], a.used[slot], a.cap[slot])
        count = int(a.gpu_count[slot])
        assert (a.gpu_free[slot, :count] >= 0).all()
        if a.gpu_mem_each[slot] > 0:
            assert (a.gpu_mem_free[slot, :count] >= 0).all()
        want = np.zeros(a.used.shape[1])
        for entry in cache.pods_on(slot).values():
            want[: entry.placement.request.shape[0]] += entry.placement.request
        np.testing.assert_allclose(a.used[slot], want, rtol=0, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(NODE, min_size=1, max_size=4),
    profile_index=st.integers(min_value=0, max_value=len(PROFILES) - 1),
    tie_break=st.sampled_from(["first", "random"]),
    steps=st.lists(STEP, min_size=1, max_size=30),
)
def test_scheduling_never_overcommits_a_node(
    nodes: list[dict[str, Any]], profile_index: int, tie_break: str, steps: list[tuple[Any, Any]]
) -> None:
    cluster = Cluster(
        [objects.node(f"n{i}", **spec) for i, spec in enumerate(nodes)],
        PROFILES[profile_index],
        tie_break=tie_break,
        seed=5,
    )
    cache = cluster.cache
    scheduled: list[str] = []
    for i, (kind, arg) in enumerate(steps):
        if kind == "schedule":
            pod = api_pod.parse_pod(objects.pod(f"p{i}", **arg))
            fits = _fits_somewhere(cache, pod)
            result = cluster.scheduler.schedule(pod)
            if result.decision is not None:
                assert fits
                scheduled.append(pod.key)
                assert cache.is_assumed(pod.key)
            else:
                assert result.status.code == Code.UNSCHEDULABLE
                assert not fits, result.status.message
                assert result.diagnosis is not None and result.diagnosis.nodes == len(nodes)
                assert sum(n for _, n in result.diagnosis.counts) == len(nodes)
        elif scheduled:
            key = scheduled[arg % len(scheduled)]
            if kind == "bound":
                cluster.scheduler.bound(key)
            elif kind == "bind_failed":
                cluster.scheduler.bind_failed(key)
            else:
                cache.remove_pod(key)
        _assert_not_overcommitted(cache)
    assert len(cluster.binder.decisions) == len(scheduled)
