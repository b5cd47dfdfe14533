"""The simulated cluster on small clusters worked out by hand: which pods each policy places and where, the
allocation series, fully free GPU nodes, stranded nodes and the FGD paper's fragmentation."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.cache.state import Cache
from scheduler.framework import typical
from scheduler.sim import engine, metrics, policies
from scheduler.sim.trace import NodeSpec, PodSpec

# Two nodes of 2 GPUs, 8 cores and 16 GiB: 4000 GPU-milli in all.
NODES = [NodeSpec("a", 8000, 16384, 2, "T4"), NodeSpec("b", 8000, 16384, 2, "T4")]

# Typical pods: half shared pods of 500 milli, half pods of 2 whole GPUs.
SHAPES = [typical.Shape(1000, 500, 1, (), 0.5), typical.Shape(2000, 1000, 2, (), 0.5)]

# Shared pods take 1 core, the 2-GPU pod 2 cores; every pod takes 1 GiB.
PODS = [
    PodSpec("s500", 1000, 1024, 1, 500),
    PodSpec("s300", 1000, 1024, 1, 300),
    PodSpec("s700", 1000, 1024, 1, 700),
    PodSpec("s500-again", 1000, 1024, 1, 500),
    PodSpec("pair", 2000, 1024, 2, 1000),
]


def _run(policy: str, pods: list[PodSpec], *, seed: int = 0, nodes: list[NodeSpec] = NODES) -> engine.ArrivalRun:
    return engine.run_arrivals(nodes, pods, policies.build(policy, shapes=SHAPES, seed=seed), shapes=SHAPES)


def _placements(run: engine.ArrivalRun) -> dict[str, tuple[str | None, tuple[int, ...]]]:
    """Pod name -> (node, GPU devices)."""
    assert run.cache is not None
    return {
        e.pod.name.split("#")[0]: (run.cache.names[e.placement.slot], e.placement.gpu_ids) for e in run.cache.pods()
    }


def _free_milli(cache: Cache, node: str) -> list[float]:
    slot = cache.slot_of(node)
    assert slot is not None
    return [float(x) for x in cache.arrays.gpu_free[slot, :2]]


def test_bestfit_packs_the_fuller_gpu_and_then_has_no_two_whole_gpus_for_the_pair() -> None:
    # BestFit score: int(100 x (1 - (0.5 x CPU left / 128000 + 0.5 x GPU left / 8000))), min-max rescaled.
    # s500: an empty cluster ties, the first node wins, on GPU 0:            a [500, 1000], b [1000, 1000]
    # s300: a leaves 6000 CPU + 1200 GPU -> 90, b 7000 + 1700 -> 86: a, and on a the fitting GPU with the
    #       least free milli, GPU 0:                                          a [200, 1000]
    # s700: a leaves 500 GPU, b 1300: a; only GPU 1 fits:                     a [200, 300]
    # s500-again: no GPU of a has 500 free: b, GPU 0:                         b [500, 1000]
    # pair: no node has two whole GPUs: it fails.
    run = _run("bestfit", PODS)
    assert run.placed.tolist() == [True, True, True, True, False]
    assert _placements(run) == {
        "s500": ("a", (0,)),
        "s300": ("a", (0,)),
        "s700": ("a", (1,)),
        "s500-again": ("b", (0,)),
    }
    assert run.arrived.tolist() == [500, 800, 1500, 2000, 4000]
    assert run.allocated.tolist() == [500, 800, 1500, 2000, 2000]
    assert run.gpu_capacity == 4000
    assert run.cache is not None
    assert _free_milli(run.cache, "a") == [200, 300]
    assert _free_milli(run.cache, "b") == [500, 1000]
    assert metrics.fully_free_gpu_nodes(run.cache) == 0
    # a: GPU 1500/2000, CPU 3000/8000, memory 3/16: nothing above 90%. b: GPU 500/2000: nothing above 90%.
    assert metrics.stranded_nodes(run.cache) == 0
    # Arrived demand reaches 90% (3600) with the pair; fragmentation then, per typical pod (weight 0.5 each):
    # a [200, 300]: no GPU with 500 free, no two whole GPUs: all 500 idle milli for both -> 500
    # b [500, 1000]: the shared pod fits everywhere (0); only one whole GPU for the pair: all 1500 -> 750
    # (500 + 750) / 4000 = 31.25%
    assert run.frag_at == {90: pytest.approx(31.25)}


def test_fgd_keeps_a_node_whole_for_the_pair() -> None:
    # FGD score: int(100 x sigmoid((F before - F after) / 1000)); F per node as in the fragmentation test below.
    # s500: both nodes go from F 0 to 750 (the pair can no longer use the node): a tie, a GPU 0: a [500, 1000]
    # s300: a GPU 0 -> [200, 1000]: F 750 -> 0.5 x 200 + 0.5 x 1200 = 700, score 51;
    #       a GPU 1 -> [500, 700]: F 750 -> 0 + 600 = 600, score 53; b -> F 0 -> 850, score 29.  a GPU 1
    # s700: a GPU 1 -> [500, 0]: F 600 -> 250, score 58; b: F 0 -> 800, score 31.             a GPU 1
    # s500-again: a GPU 0 -> [0, 0]: F 250 -> 0, score 56; b: F 0 -> 750, score 32.            a GPU 0
    # pair: b is still whole.
    run = _run("fgd", PODS)
    assert run.placed.tolist() == [True] * 5
    assert _placements(run) == {
        "s500": ("a", (0,)),
        "s300": ("a", (1,)),
        "s700": ("a", (1,)),
        "s500-again": ("a", (0,)),
        "pair": ("b", (0, 1)),
    }
    assert run.allocated.tolist() == [500, 800, 1500, 2000, 4000]
    assert run.cache is not None
    assert metrics.fully_free_gpu_nodes(run.cache) == 0
    # b: GPU 2000/2000 used (> 90%), memory 1024/16384 = 6% (< 20%): stranded. a: memory 4/16 = 25%, CPU 50%.
    assert metrics.stranded_nodes(run.cache) == 1
    assert run.frag_at == {90: 0.0}  # every GPU is taken


def test_a_node_no_pod_touched_is_fully_free() -> None:
    run = _run("fgd", PODS[:4])
    assert run.cache is not None
    assert _free_milli(run.cache, "b") == [1000, 1000]
    assert metrics.fully_free_gpu_nodes(run.cache) == 1
    assert run.frag_at == {}  # demand never reached 90%


def test_cpu_only_pods_count_in_no_gpu_series_and_fail_on_cpu() -> None:
    pods = [PodSpec("big", 8000, 1024, 0, 0), PodSpec("big-2", 8000, 1024, 0, 0), PodSpec("one-more", 1, 1, 0, 0)]
    run = _run("bestfit", pods)
    assert run.placed.tolist() == [True, True, False]
    assert run.arrived.tolist() == [0, 0, 0]
    assert run.allocated.tolist() == [0, 0, 0]
    assert run.cache is not None
    # Both nodes: CPU 100% used, GPU 0% and memory 6%: stranded, and still fully free GPU nodes.
    assert metrics.stranded_nodes(run.cache) == 2
    assert metrics.fully_free_gpu_nodes(run.cache) == 2


def test_cluster_fragmentation_follows_the_fgd_paper() -> None:
    nodes = [NodeSpec("a", 8000, 16384, 2, "T4"), NodeSpec("b", 4000, 16384, 2, "A10")]
    pods = [PodSpec("on-t4", 1000, 1024, 1, 700, ("T4",)), PodSpec("on-a10", 3000, 1024, 1, 1000, ("A10",))]
    run = _run("bestfit", pods, nodes=nodes)
    assert run.cache is not None
    assert _free_milli(run.cache, "a") == [300, 1000]  # 7000 CPU free
    assert _free_milli(run.cache, "b") == [0, 1000]  # 1000 CPU free
    shapes = [
        typical.Shape(1000, 0, 0, (), 0.25),  # needs no GPU
        typical.Shape(1000, 500, 1, (), 0.25),
        typical.Shape(2000, 1000, 1, ("T4",), 0.25),
        typical.Shape(4000, 1000, 1, (), 0.25),
    ]
    # a (1300 idle):  CPU-only: 1300; 500-milli: GPU 1 fits, GPU 0's 300 is a fragment: 300;
    #                 T4 whole: 300; 4-core whole: 300.                 0.25 x (1300 + 300 + 300 + 300) = 550
    # b (1000 idle):  CPU-only: 1000; 500-milli: fits with its 1 core, nothing below 500 free: 0;
    #                 T4 whole: the model is not allowed: 1000; 4-core whole: 1000 CPU free is too little: 1000.
    #                                                                   0.25 x (1000 + 0 + 1000 + 1000) = 750
    assert engine.cluster_fragmentation(run.cache, shapes) == pytest.approx(550 + 750)


def test_random_is_the_same_for_a_seed_and_differs_across_seeds() -> None:
    nodes = [NodeSpec(f"n{i}", 64000, 65536, 4, "T4") for i in range(4)]
    pods = [PodSpec(f"p{i}", 1000, 1024, 1, 100 * (1 + i % 5)) for i in range(12)]
    by_seed = {seed: _placements(_run("random", pods, seed=seed, nodes=nodes)) for seed in range(1, 5)}
    assert _placements(_run("random", pods, seed=1, nodes=nodes)) == by_seed[1]
    assert len({tuple(sorted(p.items())) for p in by_seed.values()}) > 1
    # Wherever it goes, every pod fits: 12 pods, 3600 milli, on 16 GPUs.
    assert all(len(p) == len(pods) for p in by_seed.values())


def test_every_policy_places_what_fits_and_agrees_on_the_demand() -> None:
    for policy in policies.POLICIES:
        run = _run(policy, PODS[:4])
        assert run.placed.all(), policy
        np.testing.assert_array_equal(run.arrived, [500, 800, 1500, 2000])
        np.testing.assert_array_equal(run.allocated, run.arrived)
