"""Random clusters as the kernels see them: for the kernel benchmark and for comparing kernels with their twins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.kernels import layout
from scheduler.kernels.fgd import TypicalPods

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass
class Cluster:
    cap: F64
    used: F64
    gpu_free: F64
    gpu_mem_free: F64
    gpu_count: I64
    gpu_mem_each: F64
    node_model: I64
    gen: I64


def random_cluster(
    rng: np.random.Generator, nodes: int, resources: int = 6, max_gpus: int = 8, models: int = 3
) -> Cluster:
    """Nodes with 0..max_gpus devices, partly used, with consistent GPU totals and per-device tables."""
    gpu_count = rng.choice([0, 1, 2, 4, max_gpus], size=nodes).astype(np.int64)
    gpu_mem_each = rng.choice([16.0, 32.0, 80.0], size=nodes) * 2**30
    cap = np.zeros((nodes, resources))
    cap[:, layout.CPU] = rng.choice([32000.0, 64000.0, 96000.0, 128000.0], size=nodes)
    cap[:, layout.MEMORY] = rng.choice([128.0, 256.0, 512.0], size=nodes) * 2**30
    cap[:, layout.PODS] = 110.0
    cap[:, layout.FIXED :] = rng.choice([0.0, 4.0, 8.0], size=(nodes, resources - layout.FIXED))
    used = cap * rng.uniform(0.0, 1.0, size=cap.shape)
    used[:, layout.PODS] = rng.integers(0, 110, size=nodes)
    slots = np.arange(max_gpus) < gpu_count[:, None]
    # A mix of fully free, fully used and partly used devices, in steps of 10 milli as in real workloads.
    gpu_free = rng.choice([0.0, 1000.0, 1000.0, 500.0, 250.0, 730.0, 60.0], size=(nodes, max_gpus))
    gpu_free = np.where(slots, gpu_free, 0.0)
    gpu_mem_free = np.where(slots, gpu_mem_each[:, None] * gpu_free / 1000.0, 0.0)
    cap[:, layout.GPU_MILLI] = 1000.0 * gpu_count
    used[:, layout.GPU_MILLI] = cap[:, layout.GPU_MILLI] - gpu_free.sum(axis=1)
    cap[:, layout.GPU_MEMORY] = gpu_mem_each * gpu_count
    used[:, layout.GPU_MEMORY] = cap[:, layout.GPU_MEMORY] - gpu_mem_free.sum(axis=1)
    node_model = np.where(gpu_count > 0, rng.integers(0, models, size=nodes), -1).astype(np.int64)
    gen = np.arange(nodes, dtype=np.int64)
    return Cluster(cap, used, gpu_free, gpu_mem_free, gpu_count, gpu_mem_each, node_model, gen)


def random_typical(rng: np.random.Generator, count: int = 12, models: int = 3) -> TypicalPods:
    k = rng.choice([0, 1, 1, 1, 2, 4, 8], size=count).astype(np.int64)
    milli = np.where(k == 1, rng.choice([100.0, 250.0, 500.0, 1000.0], size=count), np.where(k > 1, 1000.0, 0.0))
    cpu = rng.choice([1000.0, 4000.0, 8000.0, 16000.0], size=count)
    any_model = rng.random(count) < 0.7
    model_ok = rng.random((count, models)) < 0.5
    weight = rng.random(count)
    return TypicalPods(cpu, milli, k, any_model, model_ok, weight / weight.sum())


def random_request(rng: np.random.Generator, resources: int = 6) -> tuple[F64, int, float, float]:
    """A request vector with its GPU part: (req, k, m, gmem)."""
    req = np.zeros(resources)
    req[layout.CPU] = rng.choice([0.0, 500.0, 4000.0, 16000.0])
    req[layout.MEMORY] = rng.choice([0.0, 1.0, 16.0, 64.0]) * 2**30
    req[layout.PODS] = 1.0
    req[layout.FIXED :] = rng.choice([0.0, 1.0], size=resources - layout.FIXED)
    kind = rng.integers(0, 3)
    if kind == 0:
        return req, 0, 0.0, 0.0
    if kind == 1:
        k = int(rng.choice([1, 2, 4, 8]))
        req[layout.GPU_MILLI] = 1000.0 * k
        return req, k, 1000.0, 0.0
    m = float(rng.choice([50.0, 250.0, 500.0, 730.0]))
    gmem = float(rng.choice([0.0, 2.0, 8.0])) * 2**30
    req[layout.GPU_MILLI] = m
    req[layout.GPU_MEMORY] = gmem
    return req, 1, m, gmem
