"""CPU seconds per pod of the scheduling core as the operator drives it, for any source tree: a before/after pair.

The operator's work per pod, without the API server: each pending pod is parsed from its raw dict (as the pod
feed reads it), handed to ``SchedulingLoop.pod_pending``, scheduled by ``SchedulingLoop.run_once`` (the queue, the
session and its actions, the cycle, the plugins), and confirmed as the watch confirms a binding (the bound pod
parsed again, ``Cache.upsert_pod``, ``SchedulingLoop.pod_placed``). ``--pods`` one-GPU pods on ``--nodes`` nodes
of 8 GPUs, the default profile.

``--tree DIR`` runs the ``scheduler`` package of another checkout (an older commit's, run with that checkout's
virtualenv: ``/old/.venv/bin/python -m benchmarks.loop_cpu --tree /old``; the script runs itself again with that
tree first on ``PYTHONPATH``), so two commits are compared by the same workload. CPU time (``time.process_time``),
not wall time: on a shared machine the wall clock measures the neighbours. Each round starts from an empty cache;
the best round and all rounds are printed. Then ``--bound`` bound pods (6 one-GPU and 4 CPU-only a node) are parsed
as a restart's listing parses them, per round. ``--profile FILE`` writes a cProfile of the last round (timed on CPU
time) for ``python -m pstats``.

Run: ``.venv/bin/python -m benchmarks.loop_cpu [--pods 3000] [--nodes 1000] [--rounds 3] [--tree DIR]``.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

#: This checkout (not imported from benchmarks.harness: with ``--tree`` the script runs beside another checkout).
REPO = Path(__file__).resolve().parents[1]
#: Set in the run again with ``--tree`` first on the path, so that it is run again only once.
AGAIN = "GPUSCHED_LOOP_CPU_TREE"


def raw_node(i: int) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    labels = {"kubernetes.io/hostname": f"node-{i}"}
    return {
        "metadata": {"name": f"node-{i}", "labels": labels},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def raw_pod(i: int) -> dict[str, Any]:
    meta = {"name": f"p{i}", "namespace": "bench", "uid": f"uid-{i}", "creationTimestamp": "2026-11-28T00:00:00Z"}
    resources = {"requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}}
    return {
        "metadata": meta,
        "spec": {"schedulerName": "gpusched", "containers": [{"name": "c", "resources": resources}]},
    }


class _NoEvents:
    """The loop's Events port, saying nothing (every method accepted and ignored)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class _Decisions:
    """A binder that keeps the decisions, for the harness to confirm as the watch would."""

    def __init__(self) -> None:
        self.decisions: list[Any] = []

    def bind(self, decision: Any) -> None:
        self.decisions.append(decision)


def one_round(nodes: int, pods: int) -> tuple[float, int]:
    """(CPU microseconds per bound pod, pods bound) for one round from an empty cache."""
    from scheduler.api.objects import node as api_node
    from scheduler.api.objects import pod as api_pod
    from scheduler.framework import profile

    infos = [api_node.parse_node(raw_node(i)) for i in range(nodes)]
    binder = _Decisions()
    try:
        from scheduler.core import root
    except ImportError:  # a tree before the composition root
        cache, loop = _wired_by_hand(infos, binder)
    else:
        core = root.build(
            profile.load(), binder=binder, clock=time.time, events=_NoEvents(), nodes=infos, pop_from_backoff=True
        )
        cache, loop = core.cache, core.loop
    raws = [raw_pod(i) for i in range(pods)]
    started = time.process_time()
    for raw in raws:
        loop.pod_pending(api_pod.parse_pod(raw))
    bound = 0
    while loop.run_once():
        for decision in binder.decisions:
            raw = raws[int(decision.pod.name[1:])]
            raw["spec"]["nodeName"] = decision.node
            placed, _ = api_pod.parse_bound_pod(raw)
            cache.upsert_pod(placed)
            loop.pod_placed(placed)
            bound += 1
        binder.decisions.clear()
    return (time.process_time() - started) / max(1, bound) * 1e6, bound


def _wired_by_hand(infos: list[Any], binder: _Decisions) -> tuple[Any, Any]:
    """The cache and loop as trees before ``scheduler.core.root`` wired them."""
    from scheduler.cache.state import Cache
    from scheduler.core.cycle import Scheduler
    from scheduler.core.loop import SchedulingLoop
    from scheduler.framework import profile
    from scheduler.queue.scheduling import SchedulingQueue

    try:
        from scheduler.core.extension_points import Framework
    except ImportError:  # before the split's renames
        from scheduler.core.framework import Framework  # type: ignore[no-redef]

    cache = Cache()
    for info in infos:
        cache.upsert_node(info)
    scheduler = Scheduler(cache, Framework.build(profile.load()), binder)
    try:
        queue = SchedulingQueue(clock=time.time, pop_from_backoff=True)
    except TypeError:  # before pop_from_backoff
        queue = SchedulingQueue(clock=time.time)
    return cache, SchedulingLoop(scheduler, queue, clock=time.time, events=_NoEvents())


def parse_round(pods: int) -> float:
    """CPU microseconds per pod to parse ``pods`` bound pods as a restart's listing does (per node, as
    benchmarks/startup.py makes them: 6 one-GPU pods and 4 CPU-only pods, 1 CPU and 1 GiB each)."""
    from scheduler.api.objects import pod as api_pod

    raws = []
    for i in range(pods):
        limits = {"nvidia.com/gpu": "1"} if i % 10 < 6 else {}
        resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits}
        spec = {"nodeName": f"node-{i // 10}", "containers": [{"name": "main", "resources": resources}]}
        meta = {"name": f"run-{i}", "namespace": "default", "uid": f"uid-{i}"}
        raws.append({"metadata": meta, "spec": spec, "status": {"phase": "Running"}})
    started = time.process_time()
    for raw in raws:
        api_pod.parse_bound_pod(raw)
    return (time.process_time() - started) / pods * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=REPO, help="the source tree whose scheduler package is run")
    parser.add_argument("--bound", type=int, default=10_000, help="bound pods parsed per round (0: none)")
    parser.add_argument("--profile", type=Path, help="write a cProfile (on CPU time) of the last round here")
    args = parser.parse_args()
    tree = args.tree.resolve()
    found = importlib.util.find_spec("scheduler")
    elsewhere = found is None or found.origin is None or Path(found.origin).resolve().parents[1] != tree
    if elsewhere and os.environ.get(AGAIN) != str(tree):
        env = {**os.environ, AGAIN: str(tree), "PYTHONPATH": os.pathsep.join([str(tree), str(REPO)])}
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]], env)
    import scheduler

    where = Path(scheduler.__file__).resolve().parent.parent
    if where != args.tree.resolve():
        print(f"the scheduler package came from {where}, not {args.tree}", file=sys.stderr)
        return 2
    one_round(args.nodes, min(args.pods, 50))  # kernels compiled or loaded from numba's cache
    rounds = []
    bound = 0
    for r in range(args.rounds):
        if args.profile is not None and r == args.rounds - 1:
            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
            us, bound = one_round(args.nodes, args.pods)
            profiler.disable()
            profiler.dump_stats(str(args.profile))
            us = float("nan")  # the profiler's own cost: not a figure
        else:
            us, bound = one_round(args.nodes, args.pods)
        rounds.append(us)
    measured = [us for us in rounds if us == us]
    print(f"tree {where}: {args.pods} one-GPU pods on {args.nodes} nodes, {bound} bound")
    print("CPU us per pod, each round: " + " ".join("(profiled)" if us != us else f"{us:.0f}" for us in rounds))
    if measured:
        print(f"best: {min(measured):.0f} us per pod")
    if args.bound:
        parsed = [parse_round(args.bound) for _ in range(args.rounds)]
        print(f"parse_bound_pod, {args.bound} bound pods a round: " + " ".join(f"{us:.1f}" for us in parsed))
        print(f"best: {min(parsed):.1f} us per bound pod")
    return 0


if __name__ == "__main__":
    sys.exit(main())
