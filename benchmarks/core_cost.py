"""What the everyday-pod rules cost a pod that uses none of them: the scheduling core with and without them.

A plain one-GPU pod (no affinity, no spread, no ports, no volumes, no node preferences) should pay nothing for
the plugins that honour those rules. This script schedules ``--pods`` such pods one after another on the 1,213
GPU nodes of the Alibaba GPU trace (or a synthetic cluster of the same size when ../shared is absent), then
removes them, with two profiles built from the default one in the same process:

- ``default``: the operator's default profile as shipped;
- ``bare``: the same without the everyday-pod plugins (``ports``, ``interpod``, ``topology_spread``, ``volumes``
  when present) and without the ``node_rules`` score (its filter stays: node selectors and taints are older).

Runs alternate between the two (``--rounds`` each), so load on the machine falls on both alike; the best round of
each is printed in microseconds per pod, with their ratio. Decisions are compared too: both profiles must pick
the same node for every pod (a plain pod scores 0 on every node in each of the left-out plugins).

Run: ``.venv/bin/python -m benchmarks.core_cost [--pods 3000] [--rounds 6]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from benchmarks import harness
from scheduler.api.basics.resources import CPU, MEMORY, PODS, GpuRequest
from scheduler.api.objects.node import NodeInfo
from scheduler.api.objects.pod import PodRequest
from scheduler.core import cycle, root
from scheduler.framework import profile
from scheduler.framework.profile import ProfileConfig
from scheduler.sim import trace

NODES_CSV = harness.TRACE / "openb_node_list_gpu_node.csv"
#: Plugins that exist for everyday pods; ``bare`` leaves them out.
EVERYDAY = frozenset({"ports", "interpod", "topology_spread", "volumes"})


def nodes() -> tuple[list[NodeInfo], str]:
    if NODES_CSV.exists():
        return [n.info() for n in trace.load_nodes(NODES_CSV)], f"{NODES_CSV.name} (1,213 GPU nodes)"
    synthetic = [
        NodeInfo(
            name=f"node-{i:04d}",
            allocatable={CPU: 96_000, MEMORY: 768 * 2**30, PODS: 110},
            gpus=8,
        )
        for i in range(1213)
    ]
    return synthetic, "synthetic: 1,213 nodes of 8 GPUs (../shared is absent)"


def bare(config: ProfileConfig) -> ProfileConfig:
    plugins = []
    for plugin in config.plugins:
        if plugin.name in EVERYDAY:
            continue
        if plugin.name == "node_rules":
            plugin = dataclasses.replace(plugin, weight=0.0)
        plugins.append(plugin)
    return dataclasses.replace(config, name="bare", plugins=tuple(plugins))


def one_round(config: ProfileConfig, infos: list[NodeInfo], pods: list[PodRequest]) -> tuple[float, list[str]]:
    scheduler = root.build_scheduler(config, binder=cycle.NoBinding(), nodes=infos)
    cache = scheduler.cache
    scheduler.schedule(pods[0])  # first call: kernels compiled, pod index built
    cache.forget(pods[0].key)
    chosen = []
    started = time.perf_counter()
    for pod in pods:
        result = scheduler.schedule(pod)
        chosen.append(result.decision.node if result.decision else "")
    elapsed = time.perf_counter() - started
    for pod in pods:
        cache.forget(pod.key)
    return elapsed / len(pods) * 1e6, chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    infos, where = nodes()
    default = profile.load()
    profiles = {"default": default, "bare": bare(default)}
    pods = [
        PodRequest(
            namespace="bench",
            name=f"p{i}",
            resources={CPU: 4000, MEMORY: 16 * 2**30, PODS: 1},
            gpu=GpuRequest(count=1),
        )
        for i in range(args.pods)
    ]
    best = {name: float("inf") for name in profiles}
    decisions: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for name, config in profiles.items():
            us, chosen = one_round(config, infos, pods)
            best[name] = min(best[name], us)
            decisions[name] = chosen
    same = sum(a == b for a, b in zip(decisions["default"], decisions["bare"], strict=True))
    left_out = sorted(p.name for p in default.plugins if p.name in EVERYDAY)
    print(f"cluster: {where}; {args.pods} one-GPU pods, best of {args.rounds} alternating rounds")
    print(f"bare = default without {', '.join(left_out)} and the node_rules score")
    for name, us in best.items():
        print(f"{name:>8}: {us:7.1f} us per pod")
    print(f"default / bare: {best['default'] / best['bare']:.3f}; same node chosen for {same} of {args.pods} pods")


if __name__ == "__main__":
    main()
