"""The offline re-pack of issue 27 (scheduler/sim/repack.py) on clusters small enough to follow by hand."""

from __future__ import annotations

import dataclasses

import numpy as np

from scheduler.cache.state import Cache
from scheduler.sim import repack
from scheduler.sim.trace import NodeSpec, PodSpec


def _state(nodes: list[NodeSpec], pods: list[PodSpec], where: dict[int, tuple[str, int]]) -> tuple[Cache, np.ndarray]:
    """A final state: pod ``i`` (named ``<name>#i``) on ``where[i]`` (node, device); the others failed."""
    cache = Cache()
    for node in nodes:
        cache.upsert_node(node.info())
    for i, (node_name, device) in where.items():
        request = pods[i].request(f"{pods[i].name}#{i}")
        cache.upsert_pod(dataclasses.replace(request, node_name=node_name, gpu_ids=(device,), phase="Running"))
    return cache, np.array([i in where for i in range(len(pods))])


def test_packing_two_shared_pods_on_one_gpu_frees_the_other_for_a_failed_whole_gpu_pod() -> None:
    nodes = [NodeSpec("n0", cpu_milli=64000, memory_mib=65536, gpus=2)]
    pods = [PodSpec("a", 1000, 1024, 1, 300), PodSpec("b", 1000, 1024, 1, 300), PodSpec("w", 1000, 1024, 1, 1000)]
    cache, placed = _state(nodes, pods, {0: ("n0", 0), 1: ("n0", 1)})
    for order in repack.ORDERS:
        done = repack.repack(cache, pods, placed, order=order)
        # One of the two moves (the other keeps its GPU), and the whole-GPU pod takes the freed GPU.
        assert (done.before, done.after, done.moved, done.lost) == (30.0, 80.0, 1, 0), (order, done)
        assert (done.newly_placed, done.free_gpus_before, done.free_gpus) == (1, 0, 1)
    assert sorted(e.pod.name for e in cache.pods()) == ["a#0", "b#1"]  # the cache is only read


def test_the_nodes_cpu_bounds_the_packing_unless_it_is_left_out() -> None:
    # n0 has 1 CPU left beside a: b (2 CPUs) cannot join a there, so n1's GPU stays busy and w fails again; with the
    # GPUs alone, b joins a and w takes n1's GPU.
    nodes = [
        NodeSpec("n0", cpu_milli=2000, memory_mib=65536, gpus=1),
        NodeSpec("n1", cpu_milli=64000, memory_mib=65536, gpus=1),
    ]
    pods = [PodSpec("a", 1000, 1024, 1, 300), PodSpec("b", 2000, 1024, 1, 300), PodSpec("w", 1000, 1024, 1, 1000)]
    cache, placed = _state(nodes, pods, {0: ("n0", 0), 1: ("n1", 0)})
    held = repack.repack(cache, pods, placed, order="ffd")
    assert (held.after, held.moved, held.newly_placed) == (30.0, 0, 0), held
    free = repack.repack(cache, pods, placed, order="ffd", cpu=False)
    assert (free.after, free.moved, free.newly_placed) == (80.0, 1, 1), free
    # Packing each node on its own moves nothing here: each node has one GPU.
    assert repack.repack(cache, pods, placed, order="node").moved == 0


def test_the_repair_places_a_failed_pod_by_moving_the_smallest_pod_that_makes_room() -> None:
    # GPU 0: 800 used; GPU 1: 150 + 600. A 400-milli pod fits on neither; the 150 moving to GPU 0 makes room on 1.
    nodes = [NodeSpec("n0", cpu_milli=64000, memory_mib=65536, gpus=2)]
    pods = [
        PodSpec("big", 1000, 1024, 1, 800),
        PodSpec("small", 1000, 1024, 1, 150),
        PodSpec("mid", 1000, 1024, 1, 600),
        PodSpec("late", 1000, 1024, 1, 400),
    ]
    cache, placed = _state(nodes, pods, {0: ("n0", 0), 1: ("n0", 1), 2: ("n0", 1)})
    fixed = repack.repair(cache, pods, placed)
    assert fixed.before == 77.5 and fixed.steps == [(1, 97.5)] and (fixed.placed, fixed.failed) == (3, 1)
    assert fixed.at(0) == 77.5 and fixed.at(1) == 97.5
