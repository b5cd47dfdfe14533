"""The ``gpusched`` command: ``run`` (the operator), ``dashboard``, ``explain``, ``simulate``, ``snapshot``, ``trace``,
``bench kernels``, ``node-topology``.

Each command imports what it needs when it runs: ``gpusched run`` starts in a cluster after every restart, and
the simulator (with its plotting) has nothing to do there, so only the arguments of the command named on the
command line are built; ``gpusched --help`` builds none of them and imports nothing heavy, so it answers at
once. Every command is still listed there, with a line saying what it is for.

``gpusched --version`` prints ``gpusched`` and ``scheduler.__version__``, the one place the version is written:
pyproject.toml reads it from there for the package's metadata, and the image tag in manifests/ matches it. The
running code's own attribute is printed rather than the installed metadata, which describes whatever checkout
was installed last (an editable install, a PYTHONPATH) and can disagree with the code that runs.

A user error is one line on stderr and exit code 2, with no traceback and before any long work starts:
argparse's own errors (an unknown option, a number that is not one) are cut to one line too.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import scheduler
from scheduler.api.basics.errors import InvalidObject


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default after its help, unless there is none to show (None, a flag's False) or the
    help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            action.default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
            or "default" in text
            or "%(default)" in text
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


#: Help for arguments that ``scheduler.k8s`` defines without one (filled in only where it is missing).
_MISSING_HELP = {
    "log_format": "json (one object a line), console (coloured text) or auto (console on a terminal, else json)",
    "namespace": "the pod's or PodGroup's namespace",
}


def _fill_missing_help(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if action.help is None and action.dest in _MISSING_HELP:
            action.help = _MISSING_HELP[action.dest]


def _count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``low..high``; anything else is refused before any work starts."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return parse


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

    from scheduler.api.devices import gputopo, nvidia_smi

    try:
        text = Path(args.from_nvidia_smi).read_text()
    except OSError as exc:
        raise InvalidObject(f"cannot read: {exc.strerror}", obj=f"file {args.from_nvidia_smi}") from None
    except UnicodeDecodeError:
        raise InvalidObject("not text", obj=f"file {args.from_nvidia_smi}") from None
    print(gputopo.to_annotation(nvidia_smi.read(text, source=args.from_nvidia_smi)))
    return 0


@dataclass(frozen=True, slots=True)
class _Command:
    """A command whose arguments and work live in a module imported only when the command is given (so that
    ``gpusched simulate`` does not import the Kubernetes client, nor ``gpusched run`` the simulator)."""

    summary: str
    description: str
    #: ``module:function``: the function that adds the command's arguments to a parser, and the one that runs it.
    arguments: str
    entry: str
    #: Whether arguments without a help text get the shared ones (``_MISSING_HELP``).
    fill_help: bool = False
    #: Whether Python's collector makes no full pass from the command's imports until the command restores it.
    #: ``gpusched run`` makes most of its objects before its first decision (its imports, the kernels' warm-up), and
    #: they live as long as the process; it freezes them once the kernels are warm (scheduler/k8s/run.py). The full
    #: passes meanwhile walked all of them again and again and found next to nothing to free. The young passes go on:
    #: they free the imports' short-lived cycles (about 84,000 objects, which would else be frozen with the rest).
    #: Imports and warm-up took 0.712 s of CPU so against 0.786 s with every pass (docs/performance.md, start-up).
    full_passes_deferred: bool = False

    def add(self, parser: argparse.ArgumentParser) -> None:
        _function(self.arguments)(parser)
        if self.fill_help:
            _fill_missing_help(parser)

    def run(self, args: argparse.Namespace) -> int:
        return int(_function(self.entry)(args))


def simulate(args: argparse.Namespace) -> int:
    """``gpusched simulate``, given the operator's config loader for ``--config`` (the simulator and the operator's
    package do not import each other; this module composes them)."""
    from scheduler.k8s import config as k8s_config
    from scheduler.sim import command

    return command.run(args, load_config=k8s_config.load)


def _function(where: str) -> Callable[..., Any]:
    module, _, name = where.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


_MODULE_COMMANDS = {
    "run": _Command(
        "run the scheduler in a cluster (the operator)",
        "Run the scheduler against the cluster of a kubeconfig (or in-cluster): watch pods, nodes, PodGroups and "
        "Queues, and bind pods whose schedulerName is gpusched (or --scheduler-name). See docs/operator.md.",
        "scheduler.k8s.run:add_arguments",
        "scheduler.k8s.run:main",
        fill_help=True,
        full_passes_deferred=True,
    ),
    "dashboard": _Command(
        "open the read-only dashboard of a cluster on this machine",
        "Watch the cluster of a kubeconfig as the scheduler does, without leading (it decides and writes nothing), and "
        "serve the dashboard (cluster map, queues, waiting work) on http://127.0.0.1:8765. The scheduler itself serves "
        "it with gpusched run --dashboard-port. See docs/dashboard.md.",
        "scheduler.k8s.serve.dashboard_options:add_local_arguments",
        "scheduler.k8s.run:main",
        fill_help=True,
        full_passes_deferred=True,
    ),
    "explain": _Command(
        "why a pod or podgroup/NAME is pending, or how queue/NAME stands",
        "Say why a pod or a gang (podgroup/NAME) is pending, from the cluster as it is now: which filters fail on how "
        "many nodes, its queue and its place there; or how a queue (queue/NAME) stands: its guarantee, limit, what it "
        "holds and borrows, its waiting work and its shares. Reads only; writes nothing.",
        "scheduler.k8s.serve.explain:add_arguments",
        "scheduler.k8s.serve.explain:main",
        fill_help=True,
    ),
    "simulate": _Command(
        "compare placement policies, or your own configs on a snapshot of your cluster, side by side",
        "Run placement policies on a cluster and workload (built in, or the Alibaba GPU trace: see gpusched "
        "trace) through the scheduler's own core, and print a table; or run a built-in scenario (--scenario); or "
        "compare your own config files (--config) and Queues (--queues) on your cluster as exported by gpusched "
        "snapshot (--snapshot). See docs/simulator.md.",
        "scheduler.sim.command:add_arguments",
        "scheduler.cli:simulate",
    ),
    "snapshot": _Command(
        "export a live cluster's nodes, pods, PodGroups and Queues for gpusched simulate --snapshot",
        "List the nodes, the running and pending pods, the PodGroups and the Queues of the cluster of a kubeconfig "
        "and write them to DIR/snapshot.json, names hashed on request (--hash-names); then compare configs on it: "
        "gpusched simulate --snapshot DIR --config current.yaml --config candidate.yaml. Reads only. "
        "See docs/simulator.md.",
        "scheduler.k8s.snapshot:add_arguments",
        "scheduler.k8s.snapshot:main",
    ),
    "trace": _Command(
        "download the public Alibaba GPU trace for gpusched simulate",
        "Download files of the public Alibaba GPU cluster trace (github.com/alibaba/clusterdata, folder "
        "cluster-trace-gpu-v2023/csv) into a cache directory, check that they load, and print their paths. "
        "Files already there are not downloaded again.",
        "scheduler.sim.fetch:add_arguments",
        "scheduler.sim.fetch:run",
    ),
}


#: Nodes ``bench kernels`` accepts: far above any real cluster, so that a typo (a few zeros too many) is refused
#: at once instead of exhausting memory while the synthetic cluster is built.
BENCH_MAX_NODES = 1_000_000


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; only the arguments of ``command`` (if any) are built, so only its modules imported."""
    parser = _Parser(
        prog="gpusched",
        description="A Kubernetes scheduler for GPU clusters, and a simulator that runs the same scheduling core.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"gpusched {scheduler.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=description, formatter_class=_Formatter)

    for name, spec in _MODULE_COMMANDS.items():
        command_parser = add(name, spec.summary, spec.description)
        if command == name:
            spec.add(command_parser)
        command_parser.set_defaults(func=spec.run)

    bench = add("bench", "benchmarks", "Benchmarks that print figures; `gpusched bench kernels` is the one there is.")
    if command == "bench":
        bench_sub = bench.add_subparsers(dest="what", required=True, metavar="WHAT")
        kernels = bench_sub.add_parser(
            "kernels",
            help="time every scoring kernel against its NumPy twin",
            description="Time every scoring kernel (numba, one thread and all cores) against its NumPy twin on a "
            "synthetic cluster of 8-GPU nodes.",
            formatter_class=_Formatter,
        )
        kernels.add_argument(
            "--nodes", type=_count(1, BENCH_MAX_NODES), default=10_000, help="nodes in the synthetic cluster"
        )
        kernels.add_argument("--pods", type=_count(1, 100_000), default=20, help="pods scored per timing round")
        kernels.add_argument("--repeat", type=_count(1, 1000), default=3, help="rounds of timed calls")
        kernels.add_argument("--json", action="store_true", help="print JSON instead of a table")
        kernels.set_defaults(func=_bench_kernels)

    topology = add(
        "node-topology",
        "print a node's gpusched.io/gpu-topology annotation",
        "Turn the output of `nvidia-smi topo -m` into the node annotation gpusched.io/gpu-topology (JSON).",
    )
    if command == "node-topology":
        topology.add_argument(
            "--from-nvidia-smi", required=True, metavar="FILE", help="the output of `nvidia-smi topo -m`"
        )
    topology.set_defaults(func=_node_topology)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = words[0] if words and not words[0].startswith("-") else None
    spec = _MODULE_COMMANDS.get(command or "")
    restore = _deferring_full_passes() if spec is not None and spec.full_passes_deferred else _nothing
    try:
        args = build_parser(command).parse_args(words)
        args.restore_collector = restore  # for the command to call once its long-lived objects are frozen
        return int(args.func(args))
    except InvalidObject as exc:
        print(f"gpusched: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpusched: interrupted", file=sys.stderr)
        return 130
    finally:
        restore()


def _deferring_full_passes() -> Callable[[], None]:
    """Keep Python's collector from making a full pass until the returned function is called (any number of times);
    its young passes go on. Its generation-2 threshold counts the middle passes since the last full one."""
    thresholds = gc.get_threshold()
    young, middle, _ = thresholds
    gc.set_threshold(young, middle, _NEVER)

    def restore() -> None:
        if gc.get_threshold() == (young, middle, _NEVER):
            gc.set_threshold(*thresholds)

    return restore


def _nothing() -> None:
    return None


#: A generation-2 threshold never reached in a start: a full pass after this many middle ones.
_NEVER = 1 << 30


if __name__ == "__main__":
    sys.exit(main())
