"""The ``gpusched`` command: ``run`` (the operator), ``explain``, ``simulate``, ``bench kernels``, ``node-topology``.

Each command imports what it needs when it runs: ``gpusched run`` starts in a cluster after every restart, and
the simulator (with its plotting) has nothing to do there, so only the arguments of the command named on the
command line are built (every command is still listed by ``gpusched --help``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from scheduler.api.errors import InvalidObject


def _bench_kernels(args: argparse.Namespace) -> int:
    from scheduler.kernels import bench

    results = bench.run(nodes=args.nodes, pods=args.pods, repeat=args.repeat)
    if args.json:
        print(json.dumps({"nodes": args.nodes, "kernels": results}, indent=2))
        return 0
    print(f"kernels on {args.nodes} nodes (8 GPUs, 6 resource columns): ns per node per pod, median of single calls")
    print(f"{'kernel':<20}{'numba':>10}{'numpy':>12}{'speedup':>10}{'1 thread':>11}{'all cores':>11}")
    for name, r in results.items():
        print(
            f"{name:<20}{r['numba_ns_per_node']:>10.2f}{r['numpy_ns_per_node']:>12.2f}{r['speedup']:>9.1f}x"
            f"{r['numba_serial_ns_per_node']:>11.2f}{r['numba_parallel_ns_per_node']:>11.2f}"
        )
    return 0


def _node_topology(args: argparse.Namespace) -> int:
    from pathlib import Path

    from scheduler.api import gputopo

    try:
        text = Path(args.from_nvidia_smi).read_text()
    except OSError as exc:
        raise InvalidObject(f"cannot read: {exc.strerror}", obj=f"file {args.from_nvidia_smi}") from None
    print(gputopo.to_annotation(gputopo.from_nvidia_smi(text, source=args.from_nvidia_smi)))
    return 0


def _run(args: argparse.Namespace) -> int:
    from scheduler.k8s import run

    return run.main(args)


def _explain(args: argparse.Namespace) -> int:
    from scheduler.k8s import explain

    return explain.main(args)


def _simulate(args: argparse.Namespace) -> int:
    from scheduler.sim import command as sim_command

    return int(sim_command.run(args))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; with ``command`` given, only that command's arguments are built (and imported)."""
    parser = argparse.ArgumentParser(prog="gpusched", description="A Kubernetes scheduler for GPU clusters.")
    sub = parser.add_subparsers(dest="command", required=True)

    def wanted(name: str) -> bool:
        return command is None or command == name

    operator = sub.add_parser("run", help="run the scheduler in a cluster (the operator)")
    if wanted("run"):
        from scheduler.k8s import run

        run.add_arguments(operator)
    operator.set_defaults(func=_run)
    why = sub.add_parser("explain", help="why a pod (or podgroup/NAME) is pending")
    if wanted("explain"):
        from scheduler.k8s import explain

        explain.add_arguments(why)
    why.set_defaults(func=_explain)
    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="what", required=True)
    kernels = bench_sub.add_parser("kernels", help="time every scoring kernel against its NumPy twin")
    kernels.add_argument("--nodes", type=int, default=10_000, help="nodes in the synthetic cluster (default 10000)")
    kernels.add_argument("--pods", type=int, default=20, help="pods scored per timing run (default 20)")
    kernels.add_argument("--repeat", type=int, default=3, help="rounds of timed calls (default 3)")
    kernels.add_argument("--json", action="store_true", help="print JSON instead of a table")
    kernels.set_defaults(func=_bench_kernels)
    topology = sub.add_parser("node-topology", help="print a node's gpusched.io/gpu-topology annotation")
    topology.add_argument("--from-nvidia-smi", required=True, metavar="FILE", help="the output of `nvidia-smi topo -m`")
    topology.set_defaults(func=_node_topology)
    simulate = sub.add_parser("simulate", help="run policies on a cluster and workload, side by side")
    if wanted("simulate"):
        from scheduler.sim import command as sim_command

        sim_command.add_arguments(simulate)
    simulate.set_defaults(func=_simulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = words[0] if words and not words[0].startswith("-") else None
    args = build_parser(command).parse_args(words)
    try:
        return int(args.func(args))
    except InvalidObject as exc:
        print(f"gpusched: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
