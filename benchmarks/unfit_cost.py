"""What a failed cycle costs, and how much of it is saying why: kube-scheduler's counts and "never fits".

A pod that fits nowhere is told why (``scheduler.core.cycle.diagnose``): nodes counted per reason, each taint named,
and whether it never fits as the cluster is (``scheduler.core.capacity``). This script builds ``--nodes`` nodes of 8
GPUs, every ``--taint-every``-th one tainted (three taint keys), all GPUs of the untainted ones in use, and times
``Scheduler.place`` for three pods that fit nowhere:

- ``waits``: one GPU, no toleration (the untainted nodes are full, the tainted ones are kept off): counts only;
- ``too big``: nine GPUs on 8-GPU nodes: never fits, said with the largest node;
- ``tainted``: eight GPUs on a cluster whose untainted nodes hold four: never fits, the taints named.

For each it prints the best of ``--rounds`` rounds of ``--cycles`` cycles, in microseconds per cycle: the whole
failed cycle, the diagnosis alone, and the never-fits check alone (both inside the cycle's figure).

Run: ``.venv/bin/python -m benchmarks.unfit_cost [--nodes 5000] [--cycles 200] [--rounds 5]``.
"""

from __future__ import annotations

import argparse

from benchmarks import harness
from scheduler.api.basics.resources import CPU, MEMORY, PODS, GpuRequest
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import PodRequest
from scheduler.api.objects.selectors import Taint
from scheduler.cache.state import Cache
from scheduler.core import capacity, cycle, root
from scheduler.framework import profile

ALLOCATABLE = {CPU: 96_000, MEMORY: 768 * 2**30, PODS: 110}


def cluster(nodes: int, taint_every: int, small: bool) -> Cache:
    cache = Cache()
    for i in range(nodes):
        tainted = i % taint_every == 0
        taints = (Taint(f"pool-{i % 3}", "reserved", "NoSchedule"),) if tainted else ()
        gpus = 4 if small and not tainted else 8
        cache.upsert_node(NodeInfo(name=f"node-{i:05d}", allocatable=ALLOCATABLE, gpus=gpus, taints=taints))
        if not tainted:
            busy = PodRequest(
                namespace="bench", name=f"busy-{i}", resources={CPU: 1000}, gpu=GpuRequest(count=gpus, milli=1000)
            )
            cache.assume(busy, f"node-{i:05d}", tuple(range(gpus)))
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--taint-every", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    config = profile.load()
    cases = {
        "waits": (False, 1),
        "too big": (False, 9),
        "tainted": (True, 8),
    }
    print(
        f"{args.nodes} nodes of 8 GPUs, 1 in {args.taint_every} tainted; best of {args.rounds} rounds of"
        f" {args.cycles} failed cycles, microseconds per cycle"
    )
    print(f"{'case':>8} {'cycle':>9} {'diagnose':>9} {'never':>9}  message")
    for name, (small, gpus) in cases.items():
        cache = cluster(args.nodes, args.taint_every, small)
        scheduler = root.build_scheduler(config, binder=cycle.NoBinding(), cache=cache)
        pod = PodRequest(
            namespace="bench", name=name.replace(" ", "-"), resources={CPU: 1000}, gpu=GpuRequest(gpus, 1000)
        )
        snapshot = cache.snapshot()
        result = scheduler.place(pod, snapshot)  # first call: kernels compiled
        assert result.decision is None, name
        filtered = scheduler.filter(pod, snapshot)
        assert filtered.reasons is not None
        reasons, request = filtered.reasons, filtered.state.request
        whole = harness.best_us(lambda: scheduler.place(pod, snapshot), args.cycles, args.rounds)  # noqa: B023
        told = harness.best_us(lambda: cycle.diagnose(reasons, snapshot, pod, request), args.cycles, args.rounds)  # noqa: B023
        never = harness.best_us(
            lambda: capacity.pod_never_fits(snapshot, pod, request, reasons),  # noqa: B023
            args.cycles,
            args.rounds,
        )
        print(f"{name:>8} {whole:9.1f} {told:9.1f} {never:9.1f}  {result.status.message[:150]}")


if __name__ == "__main__":
    main()
