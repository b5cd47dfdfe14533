"""Whatever the order of node and pod events and of the scheduler's own decisions, a node's usage is the sum of
what its pods take, no pod is counted twice, and a snapshot is the cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache, UnknownNode
from scheduler.kernels import layout
from tests.api import objects

NODES = (
    objects.node("n0"),
    objects.node("n1", gpus=2, gpu_memory_mib="16384"),
    objects.node("n2", gpus=4, gpu_memory_mib="81920", extra={"example.com/foo": "2"}),
)
SHAPES: tuple[dict[str, Any], ...] = (
    {"cpu": "1"},
    {"cpu": "500m", "memory": "1Gi"},
    {"gpus": 1},
    {"gpus": 2},
    {"milli": 300},
    {"milli": 700, "gpu_memory": "1Gi"},
    {"cpu": "2", "extra": {"example.com/foo": "1"}},
)
PODS = 6

node_index = st.integers(min_value=0, max_value=len(NODES) - 1)
pod_index = st.integers(min_value=0, max_value=PODS - 1)
shape_index = st.integers(min_value=0, max_value=len(SHAPES) - 1)
gpu_ids = st.one_of(st.none(), st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=2, unique=True))

OPERATIONS = st.one_of(
    st.tuples(st.just("add_node"), node_index),
    st.tuples(st.just("remove_node"), node_index),
    st.tuples(st.just("devices_gone"), node_index),
    st.tuples(st.just("bind"), pod_index, node_index, shape_index, gpu_ids),
    st.tuples(st.just("assume"), pod_index, node_index, shape_index),
    st.tuples(st.just("forget"), pod_index),
    st.tuples(st.just("bind_succeeded"), pod_index),
    st.tuples(st.just("pending_echo"), pod_index),
    st.tuples(st.just("remove_pod"), pod_index),
    st.tuples(st.just("finish"), pod_index),
)


@dataclass
class Expected:
    node: str
    shape: int
    assumed: bool
    ids: list[int] | None = None


def _raw(p: int, shape: int, *, node: str = "", ids: list[int] | None = None, phase: str = "") -> dict[str, Any]:
    notes = {"gpusched.io/gpu-ids": ",".join(map(str, ids))} if ids else None
    return objects.pod(f"p{p}", node_name=node, annotations=notes, phase=phase, **SHAPES[shape])


def _apply(cache: Cache, known: set[str], model: dict[str, Expected], op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "add_node":
        raw = NODES[op[1]]
        cache.upsert_node(api_node.parse_node(raw))
        known.add(raw["metadata"]["name"])
    elif kind == "devices_gone":
        # A device plugin restart: the node reports no GPUs for a while (add_node brings them back).
        raw = NODES[op[1]]
        if raw["metadata"]["name"] in known:
            allocatable = {k: v for k, v in raw["status"]["allocatable"].items() if k != "nvidia.com/gpu"}
            cache.upsert_node(api_node.parse_node({**raw, "status": {"allocatable": allocatable}}))
    elif kind == "remove_node":
        name = NODES[op[1]]["metadata"]["name"]
        cache.remove_node(name)
        known.discard(name)
        for key in [k for k, e in model.items() if e.node == name and e.assumed]:
            del model[key]  # the scheduler's guess dies with the node; bound pods wait for it
    else:
        key = f"default/p{op[1]}"
        have = model.get(key)
        if kind == "bind":
            _, p, n, shape, ids = op
            node = NODES[n]["metadata"]["name"]
            if have is not None and not have.assumed and have.node != node:
                return  # a bound pod never moves
            cache.upsert_pod(api_pod.parse_pod(_raw(p, shape, node=node, ids=ids)))
            model[key] = Expected(node, shape, False, ids)
        elif kind == "assume":
            _, p, n, shape = op
            node = NODES[n]["metadata"]["name"]
            if have is not None:
                return  # only pending pods are scheduled
            try:
                cache.assume(api_pod.parse_pod(_raw(p, shape)), node)
            except UnknownNode:
                assert node not in known
                return
            model[key] = Expected(node, shape, True)
        elif kind == "forget":
            cache.forget(key)
            if have is not None and have.assumed:
                del model[key]
        elif kind == "bind_succeeded":
            if have is None or not have.assumed or have.node not in known:
                return
            cache.confirm(key)
            cache.upsert_pod(api_pod.parse_pod(_raw(op[1], have.shape, node=have.node)))
            have.assumed = False
        elif kind == "pending_echo":
            shape = have.shape if have is not None else 0
            cache.upsert_pod(api_pod.parse_pod(_raw(op[1], shape)))
            if have is not None and not have.assumed:
                del model[key]
        elif kind == "remove_pod":
            cache.remove_pod(key)
            model.pop(key, None)
        elif kind == "finish":
            node = have.node if have is not None else ""
            shape = have.shape if have is not None else 0
            cache.upsert_pod(api_pod.parse_pod(_raw(op[1], shape, node=node, phase="Succeeded")))
            model.pop(key, None)


def _check(cache: Cache, known: set[str], model: dict[str, Expected]) -> None:
    a = cache.arrays
    entries = list(cache.pods())
    counted = {k for k, e in model.items() if e.node in known}
    assert {e.pod.key for e in entries} == counted
    on_nodes = [key for slot in cache.nodes for key in cache.pods_on(slot)]
    assert sorted(on_nodes) == sorted(counted)  # each pod on one node, once

    for slot in range(a.slots):
        name = cache.names[slot] if slot < len(cache.names) else None
        pods = list(cache.pods_on(slot).values())
        if name is None:
            assert not a.used[slot].any() and not a.cap[slot].any()
            assert a.base_reason[slot] == layout.ABSENT
            continue
        assert all(model[e.pod.key].node == name for e in pods)
        # The row is the sum of the placements ...
        want = np.zeros(a.used.shape[1])
        for e in pods:
            want[: e.placement.request.shape[0]] += e.placement.request
        np.testing.assert_allclose(a.used[slot], want, rtol=0, atol=1e-6)
        # ... and the placements are what the pods asked for.
        for column, resource in enumerate(cache.columns):
            if column in (layout.GPU_MILLI, layout.GPU_MEMORY):
                continue
            assert a.used[slot, column] == sum(e.pod.resources.get(resource, 0) for e in pods)
        assert a.used[slot, layout.GPU_MILLI] == sum(e.pod.gpu.total_milli for e in pods)
        # The device table is the sum of the placements' devices.
        count = int(a.gpu_count[slot])
        free = np.full(count, layout.WHOLE)
        memory = np.full(count, a.gpu_mem_each[slot])
        for e in pods:
            assert len(set(e.placement.gpu_ids)) == len(e.placement.gpu_ids)
            for i, g in enumerate(e.placement.gpu_ids):
                free[g] -= e.placement.gpu_milli
                memory[g] -= e.placement.gpu_memory[i]
            ids = model[e.pod.key].ids
            if ids and len(ids) == e.pod.gpu.count and max(ids) < count:
                assert e.placement.gpu_ids == tuple(ids)  # the annotation is honoured
        np.testing.assert_allclose(a.gpu_free[slot, :count], free, rtol=0, atol=1e-6)
        np.testing.assert_allclose(a.gpu_mem_free[slot, :count], memory, rtol=0, atol=1e-6)
        assert not a.gpu_free[slot, count:].any()

    snap = cache.snapshot()
    for name in ("cap", "used", "gpu_free", "gpu_mem_free", "gpu_count", "base_reason", "gen"):
        np.testing.assert_array_equal(getattr(snap.arrays, name), getattr(a, name))
    assert snap.columns == cache.columns


@settings(max_examples=150, deadline=None)
@given(operations=st.lists(OPERATIONS, min_size=1, max_size=40))
def test_usage_is_always_the_sum_of_placements(operations: list[tuple[Any, ...]]) -> None:
    cache = Cache()
    known: set[str] = set()
    model: dict[str, Expected] = {}
    for op in operations:
        _apply(cache, known, model, op)
        _check(cache, known, model)
