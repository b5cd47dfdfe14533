"""What one consolidation search costs on a large cluster (``scheduler.core.consolidation.plan``).

Builds ``--nodes`` nodes of 8 GPUs (the default profile's plugins), fills them with running pods that a
controller recreates, and times the consolidate action's search for a pending 4-GPU pod that fits nowhere:

- ``plan``: every node has 5 to 7 GPUs used by 1-GPU pods (seeded): a plan moving one to three pods exists;
- ``none``: every node has 7 GPUs used, by three 2-GPU pods and one 1-GPU pod, so that 1 GPU is free everywhere:
  room for the pod needs two 2-GPU pods moved, and no other node has 2 free GPUs for them. The search runs its
  what-ifs until its cap (``move_plan.MAX_ATTEMPTS``) and finds nothing: the worst case.

Prints, per case, the plan (or why there is none), the what-ifs run, and the best of ``--rounds`` searches in ms.

Run: ``.venv/bin/python -m benchmarks.consolidation_search [--nodes 1000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from scheduler.api.basics.resources import CPU, MEMORY, PODS, GpuRequest
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.state import Cache
from scheduler.core import cycle, root
from scheduler.core.actions import consolidate
from scheduler.core.loop import SchedulingLoop
from scheduler.framework import profile

ALLOCATABLE = {CPU: 96_000, MEMORY: 768 * 2**30, PODS: 110}


class Quiet:
    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        return None


def _pod(name: str, gpus: int, owner: str = "") -> PodRequest:
    return PodRequest(
        namespace="bench",
        name=name,
        resources={CPU: 1000, PODS: 1},
        gpu=GpuRequest(count=gpus, milli=1000),
        owner=owner,
        owner_kind="ReplicaSet" if owner else "",
    )


def build(nodes: int, case: str, seed: int) -> SchedulingLoop:
    config = profile.load()
    config = profile.ProfileConfig(
        name=config.name, plugins=config.plugins, actions=("allocate", "consolidate"), seed=config.seed
    )
    cache = Cache()
    rng = np.random.default_rng(seed)
    for i in range(nodes):
        name = f"node-{i:05d}"
        cache.upsert_node(NodeInfo(name=name, allocatable=ALLOCATABLE, gpus=8))
        sizes = [1] * int(rng.integers(5, 8)) if case == "plan" else [2, 2, 2, 1]
        used = 0
        for j, gpus in enumerate(sizes):
            pod = _pod(f"p-{i}-{j}", gpus, owner=f"rs-{i % 50}")
            cache.assume(pod, name, tuple(range(used, used + gpus)))
            cache.confirm(pod.key)
            used += gpus
    loop = root.build(config, binder=cycle.NoBinding(), clock=lambda: 0.0, events=Quiet(), cache=cache).loop
    for entry in list(cache.pods()):
        loop.pod_placed(entry.pod)
    return loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    job = _pod("pending", 4)
    print(f"{args.nodes} nodes of 8 GPUs; a pending 4-GPU pod; best of {args.rounds} searches")
    print(f"{'case':6} {'ms':>9} {'what-ifs':>9}  plan")
    for case in ("plan", "none"):
        loop = build(args.nodes, case, args.seed)
        action = next(a for a in loop.actions if isinstance(a, consolidate.Consolidate))
        best, found = float("inf"), None
        for _ in range(args.rounds):
            snapshot = loop.scheduler.cache.snapshot()
            context = loop.cycle_context(job.key)
            started = time.perf_counter()
            found = action.plan_for(
                [job], snapshot, whole_gang=False, priority=job.priority, level=None, context=context
            )
            best = min(best, time.perf_counter() - started)
        assert found is not None
        said = found.plan.describe() if found.plan is not None else f"none: {found.why}"
        print(f"{case:6} {best * 1000:9.1f} {found.attempts:9d}  {said[:110]}")


if __name__ == "__main__":
    main()
