"""A synthetic trace in the Alibaba GPU trace's CSV format, for the churn runs (``gpusched simulate --churn``) on a
machine that cannot download the trace (``gpusched trace`` needs github.com).

The nodes and pods are the built-in simulation's (``scheduler.sim.synthetic``: 8- and 4-GPU nodes, CPU-only ones; 38%
shared-GPU pods, 48% single GPUs, a few multi-GPU and CPU-only pods), each pod given a creation time 5 s after the
previous one and a heavy-tailed duration (log-normal, median 9 minutes as openb's, sigma 2), seeded. It is not the
trace: figures measured on it say how the code's cost moved, not what the trace's runs cost.

    .venv/bin/python -m benchmarks.synthetic_trace DIR [--nodes 400] [--pods 8000] [--seed 7]
    gpusched simulate --nodes DIR/nodes.csv --pods DIR/pods.csv --churn 1.0 --policy fgd --seeds 42-42 --arrivals 300
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from scheduler.sim import synthetic

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
#: openb's median pod duration (seconds), and the log-normal's spread around it.
MEDIAN_S = 540.0
SIGMA = 2.0
GAP_S = 5


def write(directory: Path, *, nodes: int, pods: int, seed: int) -> tuple[Path, Path]:
    """Write ``nodes.csv`` and ``pods.csv`` into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    node_rows = [f"{n.name},{n.cpu_milli},{n.memory_mib},{n.gpus},{n.model}" for n in synthetic.cluster(nodes)]
    specs = synthetic.workload(pods, seed=seed)
    durations = np.exp(np.random.default_rng(seed).normal(np.log(MEDIAN_S), SIGMA, len(specs)))
    pod_rows = []
    for i, (p, duration) in enumerate(zip(specs, durations, strict=True)):
        created = GAP_S * (i + 1)
        gone = int(created + duration) + 1
        row = f"{p.name},{p.cpu_milli},{p.memory_mib},{p.num_gpu},{p.gpu_milli},{'|'.join(p.gpu_spec)},LS,Running"
        pod_rows.append(f"{row},{created},{gone},{created}")
    node_path, pod_path = directory / "nodes.csv", directory / "pods.csv"
    node_path.write_text("\n".join([NODE_HEADER, *node_rows]) + "\n")
    pod_path.write_text("\n".join([POD_HEADER, *pod_rows]) + "\n")
    return node_path, pod_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--nodes", type=int, default=400)
    parser.add_argument("--pods", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    for path in write(args.directory, nodes=args.nodes, pods=args.pods, seed=args.seed):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
