"""The built-in cluster and workload of ``gpusched simulate`` with no arguments.

The cluster (``nodes``, default 320): 8-GPU A100 and H100 nodes, 8-GPU and 4-GPU V100 nodes, 4-GPU T4 nodes
and CPU-only nodes. The workload follows the shape of public GPU traces (Alibaba's openb, 2023): about
38% shared-GPU pods (50..900 milli, most at 250..500), 48% single whole GPUs, 1% multi-GPU pods of 2, 4 or 8
GPUs, 13% CPU-only pods, and a few pods pinned to a GPU model.
"""

from __future__ import annotations

import numpy as np

from scheduler.sim.trace import NodeSpec, PodSpec

# (share of nodes, CPU milli, memory MiB, GPUs, model)
NODE_KINDS = (
    (0.30, 128_000, 1_048_576, 8, "A100"),
    (0.10, 192_000, 2_097_152, 8, "H100"),
    (0.20, 96_000, 786_432, 8, "V100"),
    (0.15, 64_000, 393_216, 4, "V100"),
    (0.15, 32_000, 196_608, 4, "T4"),
    (0.10, 64_000, 262_144, 0, ""),
)
SHARED_MILLI = (50, 100, 200, 250, 300, 400, 500, 500, 600, 700, 800, 900)
CPU_CHOICES = (1000, 2000, 4000, 6000, 8000, 12000, 16000)


def cluster(nodes: int = 320) -> list[NodeSpec]:
    specs: list[NodeSpec] = []
    counts = [round(share * nodes) for share, *_ in NODE_KINDS]
    counts[0] += nodes - sum(counts)
    for (_, cpu, mem, gpus, model), count in zip(NODE_KINDS, counts, strict=True):
        for _ in range(count):
            specs.append(NodeSpec(f"node-{len(specs):04d}", cpu, mem, gpus, model))
    return specs


def workload(pods: int = 3000, seed: int = 0) -> list[PodSpec]:
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(pods):
        u = rng.random()
        cpu = int(rng.choice(CPU_CHOICES))
        memory = int(cpu // 1000 * rng.choice([2048, 4096, 8192]))
        models: tuple[str, ...] = ()
        if rng.random() < 0.05:
            models = (str(rng.choice(["A100", "H100", "V100", "T4"])),)
        if u < 0.38:
            spec = PodSpec(f"pod-{i:05d}", cpu, memory, 1, int(rng.choice(SHARED_MILLI)), models)
        elif u < 0.86:
            spec = PodSpec(f"pod-{i:05d}", cpu, memory, 1, 1000, models)
        elif u < 0.87:
            gpus = int(rng.choice([2, 4, 8], p=[0.5, 0.3, 0.2]))
            spec = PodSpec(f"pod-{i:05d}", cpu * gpus, memory * gpus, gpus, 1000, models)
        else:
            spec = PodSpec(f"pod-{i:05d}", cpu, memory, 0, 0)
        specs.append(spec)
    return specs
