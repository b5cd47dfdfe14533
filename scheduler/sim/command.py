"""``gpusched simulate``: compare policies on a cluster and a workload, side by side.

With no arguments it runs the built-in synthetic cluster and workload; ``--nodes``/``--pods`` read the Alibaba
GPU trace format. ``--tune RATIO --seeds A-B`` follows the FGD paper's protocol; ``--replay`` uses the trace's
creation and deletion times instead; ``--churn LOAD`` runs the trace's pods at an offered GPU load, leaving after
their durations (``scheduler.sim.churn``). ``--numa POLICY`` gives the nodes NUMA zones and runs each policy
NUMA-aware and NUMA-blind, counting the pods the kubelet would refuse (``scheduler.sim.numa``). ``--snapshot DIR``
runs the operator's config files (``--config``, one or more) on a cluster exported by ``gpusched snapshot``, with the
Queue objects of ``--queues`` (``scheduler.sim.snapshot``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import numa as api_numa
from scheduler.cache.state import Cache
from scheduler.core.actions import registry
from scheduler.framework import typical
from scheduler.framework.profile import ProfileConfig
from scheduler.sim import (
    bound,
    churn,
    elastic,
    engine,
    metrics,
    policies,
    protocol,
    replay,
    report,
    scenario_runs,
    segments,
    snapshot,
    synthetic,
    tenants,
    trace,
)
from scheduler.sim import dashboard as sim_dashboard
from scheduler.sim import numa as sim_numa
from scheduler.sim import topology as sim_topology
from scheduler.sim.trace import NodeSpec, PodSpec

SCENARIOS = ("gangs", "elastic", "segments", "tenants", "topology")

#: Seeds when ``--seeds`` is not given; the topology scenario runs one (its seeds are slow and alike).
DEFAULT_SEEDS = "42-44"
TOPOLOGY_SEEDS = "42"
DEFAULT_TUNE = 1.3

#: File types matplotlib writes (``--plot``), by extension.
PLOT_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")

#: Options (by their dest) that each mode reads; any other one given is refused, not ignored.
_APPLIES = {
    "compare": {"nodes", "pods", "policy", "tune", "seeds", "json", "plot", "dashboard", "numa"},
    "replay": {"nodes", "pods", "policy", "replay", "json", "plot"},
    "churn": {
        "nodes",
        "pods",
        "policy",
        "seeds",
        "json",
        "churn",
        "arrivals",
        "durations",
        "runtime_estimate",
        "runtime_missing",
    },
    "gangs": {"nodes", "jobs", "policy", "seeds", "json"},
    "elastic": {"seeds", "json"},
    "segments": {"seeds", "json"},
    "tenants": {"policy", "seeds", "json"},
    "topology": {"seeds", "json"},
    "snapshot": {"snapshot", "config", "queues", "json"},
}
_WHERE = {"replay": "--replay", "churn": "--churn", "snapshot": "--snapshot"}
_WHY_NOT = {
    "compare": "it applies only to a scenario",  # only --jobs can be out of place here
    "replay": "a replay uses the trace's own times, once",
    "churn": "a churn run places arrivals at an offered load and measures waits, not the allocation curve",
    "gangs": "the gang scenario places jobs (--jobs) on nodes (--nodes, or its built-in cluster)",
    "elastic": "the elastic scenario runs the gang scenario's built-in jobs rigid and elastic, default profile",
    "segments": "the segments scenario has its own NVL72-shaped cluster and job",
    "tenants": "the tenants scenario has its own cluster and workload",
    "topology": "the topology scenario runs the default profile on its own labelled cluster, with topology on and off",
    "snapshot": "a snapshot's run compares the config files of --config on the snapshot's own nodes and pods",
}


#: Options one mode alone reads, and what to say when another mode is given them.
_ONLY = {
    "jobs": "only --scenario gangs reads it",
    "arrivals": "only --churn reads it",
    "durations": "only --churn reads it",
    "runtime_estimate": "only --churn reads it",
    "runtime_missing": "only --churn reads it",
    "numa": "only a comparison of placements (--tune) reads it",
    "config": "only --snapshot reads it",
    "queues": "only --snapshot reads it",
}


#: The actions a churn policy may name after a + (``fgd+consolidate``): the registry's, after allocate.
_AFTER_ALLOCATE = tuple(name for name in registry.ACTIONS if name != registry.FIRST)
_SECONDS = scenario_runs.SECONDS_PER_SEED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", metavar="FILE", help="nodes CSV (sn,cpu_milli,memory_mib,gpu,model)")
    parser.add_argument("--pods", metavar="FILE", help="pods CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,...)")
    parser.add_argument(
        "--policy",
        metavar="A,B,...",
        help=(
            f"comma-separated policies among {', '.join(policies.POLICIES)} "
            "(default: all of them; default only with --scenario gangs or tenants); with --churn, a policy may name "
            f"the session's actions after allocate, each after a + ({', '.join(_AFTER_ALLOCATE)}; defrag after "
            "consolidate): fgd+consolidate, fgd+consolidate+defrag, fgd+backfill (holds for the head of the line, "
            "docs/backfill.md)"
        ),
    )
    parser.add_argument(
        "--tune",
        type=float,
        metavar="RATIO",
        help=f"inflate the workload to RATIO x GPU capacity, the FGD paper's protocol (default: {DEFAULT_TUNE})",
    )
    parser.add_argument(
        "--seeds",
        metavar="A-B",
        help=f"seeds to average over (default: {DEFAULT_SEEDS}; {TOPOLOGY_SEEDS} with --scenario topology)",
    )
    parser.add_argument(
        "--replay", action="store_true", help="replay the trace's creation/deletion times instead of --tune"
    )
    parser.add_argument(
        "--churn",
        metavar="LOAD[,LOAD...]",
        help="pods arrive at these offered GPU loads (fractions of the cluster) and leave after their durations",
    )
    parser.add_argument(
        "--arrivals", type=int, metavar="N", help="with --churn: N pods spread evenly over --pods arrive (default: all)"
    )
    parser.add_argument(
        "--durations",
        metavar="FILE",
        help=(
            "with --churn, for a pod list without times: the list whose durations are drawn "
            "(default: openb_pod_list_default.csv beside --pods)"
        ),
    )
    parser.add_argument(
        "--runtime-estimate",
        metavar="F|LOW-HIGH",
        help=(
            "with --churn: each pod declares spec.activeDeadlineSeconds of its duration times a factor drawn from "
            "LOW-HIGH (1: exact; default with --runtime-missing: exact; without either, no pod declares one)"
        ),
    )
    parser.add_argument(
        "--runtime-missing",
        metavar="SHARE",
        help="with --churn: this share of the pods (0..1) declares no run time (default 0)",
    )
    parser.add_argument(
        "--numa",
        metavar="POLICY",
        help=(
            f"give the nodes NUMA zones under this Topology Manager policy ({', '.join(sim_numa.POLICIES)}; "
            "default none: no zones) and run each policy NUMA-aware and NUMA-blind, counting the pods the kubelet "
            "would refuse (docs/simulator.md)"
        ),
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument(
        "--plot", metavar="FILE.png", help="draw allocation and fragmentation charts (.png, .svg or .pdf)"
    )
    parser.add_argument(
        "--dashboard",
        metavar="FILE.html",
        help="write the dashboard's cluster map of each policy's cluster at the end of its first seed, side by side, "
        "as one HTML page (docs/dashboard.md)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument(
        "--snapshot",
        metavar="DIR",
        help="a cluster exported by gpusched snapshot: run each --config on its nodes and pending pods and compare "
        "what they place",
    )
    parser.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help="with --snapshot: an operator config file (gpusched run --config; its profile is what runs); give "
        "it once per config to compare, e.g. the current one and a candidate (default: the built-in config)",
    )
    parser.add_argument(
        "--queues",
        action="append",
        metavar="FILE",
        help="with --snapshot: YAML files of Queue objects used instead of the snapshot's own queues (repeatable)",
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        help=(
            "a built-in scenario instead of a placement comparison: gangs (distributed jobs, seconds a seed), "
            f"elastic (the gang jobs in two queues, rigid against elastic, about {_SECONDS['elastic']} s a seed), "
            "segments (a 64-worker job on NVL72-shaped racks with and without segments, a second a seed), "
            f"tenants (queues, about {_SECONDS['tenants']} s a seed), topology (gangs with required and preferred "
            f"levels, with topology and with it ignored, about {_SECONDS['topology']} s a seed)"
        ),
    )
    parser.add_argument(
        "--jobs",
        metavar="FILE",
        help="with --scenario gangs: jobs CSV (job,workers,gpus_per_worker,cpu_milli,memory_mib,arrival,duration)",
    )


def mode(args: argparse.Namespace) -> str:
    """What the command line asks for: ``compare`` (the FGD protocol), ``replay``, or a scenario's name."""
    if args.scenario:
        return str(args.scenario)
    if getattr(args, "snapshot", None):
        return "snapshot"
    if args.churn is not None:
        return "churn"
    return "replay" if args.replay else "compare"


def check(args: argparse.Namespace) -> None:
    """Refuse what cannot work before any long work starts: options the mode does not read, numbers out of
    range, output files that cannot be written."""
    chosen = mode(args)
    given = {
        dest for dest in set().union(*_APPLIES.values(), {"jobs"}) if getattr(args, dest, None) not in (None, False)
    }
    for dest in sorted(given - _APPLIES[chosen]):
        where = f"--scenario {chosen}" if args.scenario else _WHERE.get(chosen, "a comparison")
        why = _ONLY.get(dest, _WHY_NOT[chosen])
        raise InvalidObject(
            f"does not apply to {where} ({why})", obj="gpusched simulate", field="--" + dest.replace("_", "-")
        )
    if chosen == "churn" and not args.pods:
        raise InvalidObject("--churn needs a trace (--nodes and --pods)", obj="gpusched simulate", field="--churn")
    if chosen in ("compare", "replay", "churn") and bool(args.nodes) != bool(args.pods):
        raise InvalidObject("--nodes and --pods go together", obj="gpusched simulate", field="--nodes")
    if chosen == "snapshot" and not Path(args.snapshot).exists():
        raise InvalidObject(
            f"no folder {args.snapshot} (gpusched snapshot --out DIR writes one)",
            obj="gpusched simulate",
            field="--snapshot",
        )
    for dest in ("nodes", "pods", "jobs", "durations"):
        raw = getattr(args, dest)
        if raw and not Path(raw).is_file():
            hint = (
                ": `gpusched trace` downloads the Alibaba GPU trace's files"
                if Path(raw).name.startswith("openb_")
                else ""
            )
            raise InvalidObject(f"no file {raw}{hint}", obj="gpusched simulate", field="--" + dest)
    if args.tune is not None and not 0 < args.tune <= 10:
        raise InvalidObject(f"{args.tune} is not a ratio in (0, 10]", obj="gpusched simulate", field="--tune")
    if args.churn is not None:
        churn.parse_loads(args.churn)
        churn.declared(args.runtime_estimate, args.runtime_missing)
    if args.arrivals is not None and args.arrivals < 1:
        raise InvalidObject(f"{args.arrivals} is not a count of pods", obj="gpusched simulate", field="--arrivals")
    if args.numa is not None:
        sim_numa.parse_policy(args.numa)
    if args.json:
        check_output(args.json, "--json")
    if getattr(args, "dashboard", None):
        check_output(args.dashboard, "--dashboard")
    if args.plot:
        if importlib.util.find_spec("matplotlib") is None:
            raise InvalidObject(
                "drawing charts needs matplotlib, an optional dependency: pip install 'gpusched[plots]'",
                obj="gpusched simulate",
                field="--plot",
            )
        check_output(args.plot, "--plot")
        suffix = Path(args.plot).suffix.lower().lstrip(".")
        if suffix not in PLOT_FORMATS:
            raise InvalidObject(
                f"{args.plot!r}: name the file with an image extension ({', '.join('.' + f for f in PLOT_FORMATS)})",
                obj="gpusched simulate",
                field="--plot",
            )


def check_output(raw: str, flag: str) -> None:
    """An output file must be a file name in a folder that exists and can be written."""
    path = Path(raw)
    if path.is_dir():
        raise InvalidObject(f"{raw} is a folder; give a file name", obj="gpusched simulate", field=flag)
    folder = path.parent
    if not folder.exists():
        raise InvalidObject(f"folder {folder} does not exist (for {raw})", obj="gpusched simulate", field=flag)
    if not folder.is_dir():
        raise InvalidObject(f"{folder} is not a folder (for {raw})", obj="gpusched simulate", field=flag)
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InvalidObject(f"cannot write {raw}: permission denied", obj="gpusched simulate", field=flag)


def parse_seeds(raw: str) -> list[int]:
    try:
        if "-" in raw:
            low, high = (int(x) for x in raw.split("-", 1))
        else:
            low = high = int(raw)
    except ValueError:
        raise InvalidObject(
            f"{raw!r} is not a seed or a range like 42-51", obj="gpusched simulate", field="--seeds"
        ) from None
    if high < low:
        raise InvalidObject(f"{raw!r} is an empty range", obj="gpusched simulate", field="--seeds")
    return list(range(low, high + 1))


class Progress:
    """A one-line progress bar on a terminal; a line per run otherwise."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()

    def runner(self, label: str, total: int) -> Callable[[int], None]:
        def show(done: int) -> None:
            if self.quiet or not self.tty:
                return
            width = 30
            filled = int(width * done / max(total, 1))
            sys.stderr.write(
                f"\r{label:<28} [{'#' * filled}{'.' * (width - filled)}] {100 * done / max(total, 1):5.1f}%"
            )
            sys.stderr.flush()

        return show

    def done(self, label: str, seconds: float) -> None:
        if self.quiet:
            return
        if self.tty:
            sys.stderr.write("\r" + " " * 80 + "\r")
        sys.stderr.write(f"{label:<28} done in {seconds:.2f}s\n")
        sys.stderr.flush()


def _inputs(args: argparse.Namespace) -> tuple[list[NodeSpec], list[PodSpec], str]:
    if bool(args.nodes) != bool(args.pods):
        raise InvalidObject("--nodes and --pods go together", obj="gpusched simulate", field="--nodes")
    if args.nodes:
        return trace.load_nodes(args.nodes), trace.load_pods(args.pods), f"{args.nodes} + {args.pods}"
    if args.replay:
        raise InvalidObject("--replay needs a trace (--nodes and --pods)", obj="gpusched simulate", field="--replay")
    nodes = synthetic.cluster()
    return nodes, synthetic.workload(), f"built-in synthetic cluster ({len(nodes)} nodes) and workload"


def _warm_up(
    nodes: Sequence[NodeSpec], pods: Sequence[PodSpec], names: Sequence[str], shapes: list[typical.Shape]
) -> None:
    """Compile the kernels before timing (numba caches them on disk, so this is quick after the first run)."""
    for name in names:
        engine.run_arrivals(nodes[:4], pods[:8], policies.build(name, shapes=shapes, seed=0), shapes=shapes)


def compare_tune(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    names: Sequence[str],
    ratio: float,
    seeds: Sequence[int],
    progress: Progress,
    *,
    ends: dict[str, tuple[Cache, list[typical.Shape]]] | None = None,
    numa: api_numa.Policy | None = None,
) -> dict[str, dict[str, Any]]:
    """Every policy on every seed's inflated workload; ``ends`` gets each policy's cluster at the end of the first
    seed (with the typical pods), for the dashboard. With ``numa`` (a Topology Manager policy) the nodes have NUMA
    zones and each policy runs NUMA-aware under its name and NUMA-blind as ``NAME numa-blind``
    (``scheduler.sim.numa``), each result with its ``numa`` counts of pods the kubelet refused."""
    shapes = typical.typical_shapes([p.shape for p in pods])
    capacity = float(sum(n.gpus for n in nodes)) * 1000.0
    if capacity <= 0:
        raise InvalidObject("the cluster has no GPUs", obj="gpusched simulate", field="--nodes")
    top = round(ratio * 100)
    percents = list(range(0, top + 1))
    key = str(top)
    _warm_up(nodes, pods, names, shapes)
    results: dict[str, dict[str, Any]] = {}
    # Every policy meets the same workload and node order for a seed: made once per seed, not per policy.
    inputs = {seed: (protocol.inflate(pods, capacity, ratio, seed), protocol.tie_order(nodes, seed)) for seed in seeds}
    # (name in the results, policy, how its profile is changed: None, or NUMA-aware / NUMA-blind).
    runs: list[tuple[str, str, Callable[[ProfileConfig], ProfileConfig] | None]] = [(n, n, None) for n in names]
    if numa is not None:
        runs = [
            variant
            for name in names
            for variant in ((name, name, sim_numa.aware), (sim_numa.blind_name(name), name, sim_numa.blind))
        ]
    for name, policy, variant in runs:
        per_seed: list[dict[str, Any]] = []
        curves = []
        for seed in seeds:
            workload, seed_nodes = inputs[seed]
            label = f"{name} seed {seed}"
            config = policies.build(policy, shapes=shapes, seed=seed)
            kubelets = None if numa is None else sim_numa.Kubelets.of(seed_nodes, numa)
            run = engine.run_arrivals(
                seed_nodes,
                workload,
                config if variant is None else variant(config),
                shapes=shapes,
                progress=progress.runner(label, len(workload)),
                numa=kubelets,
            )
            progress.done(label, run.wall_s)
            curve = protocol.alloc_curve(run.arrived, run.allocated, capacity, percents)
            curves.append(curve)
            assert run.cache is not None
            if ends is not None and seed == seeds[0]:
                ends[name] = (run.cache, shapes)
            per_seed.append(
                {
                    "frag90": run.frag_at.get(90, math.nan),
                    "failed": int((~run.placed).sum()),
                    "free": metrics.fully_free_gpu_nodes(run.cache),
                    "stranded": metrics.stranded_nodes(run.cache),
                    "decisions": len(workload) / run.wall_s,
                    "wall": run.wall_s,
                }
            )
            if kubelets is not None:
                per_seed[-1]["numa"] = sim_numa.summary(kubelets.refusals, capacity)
        mean_curve = {str(x): float(np.mean([c.get(x, math.nan) for c in curves])) for x in percents}
        std_curve = {str(x): float(np.std([c.get(x, math.nan) for c in curves])) for x in percents}
        results[name] = {
            # Below --tune 1.0 the arrivals stop before 100%: that point has no value (n/a in the table).
            "alloc_at": {"100": mean_curve.get("100", math.nan), key: mean_curve[key]},
            "alloc_std_at": {"100": std_curve.get("100", math.nan), key: std_curve[key]},
            "frag_at": {"90": float(np.mean([s["frag90"] for s in per_seed]))},
            "failed_pods": float(np.mean([s["failed"] for s in per_seed])),
            "fully_free_gpu_nodes": float(np.mean([s["free"] for s in per_seed])),
            "stranded_nodes": float(np.mean([s["stranded"] for s in per_seed])),
            "decisions_per_s": float(np.mean([s["decisions"] for s in per_seed])),
            "wall_s": float(np.mean([s["wall"] for s in per_seed])),
            "per_seed_alloc_at": {key: [c.get(top, math.nan) for c in curves]},
            "curve": mean_curve,
        }
        if numa is not None:
            results[name]["numa"] = sim_numa.mean_summary([s["numa"] for s in per_seed])
    report.versus(results)
    return results


def tune_bounds(
    nodes: Sequence[NodeSpec], pods: Sequence[PodSpec], ratio: float, seeds: Sequence[int], progress: Progress
) -> dict[str, Any]:
    """The optimum's bound (scheduler/sim/bound.py) for each seed's inflated workload, at 100% and at the last
    percent, both variants (pods refused, or every pod arriving before 95% placed); means over the seeds. Without
    scipy, says so instead."""
    if not bound.available():
        return {"available": False, "reason": bound.INSTALL_HINT}
    capacity = float(sum(n.gpus for n in nodes)) * bound.WHOLE
    top = round(ratio * 100)
    points = sorted({100, top}) if top >= 100 else [top]
    per_seed: dict[str, dict[str, list[float]]] = {str(p): {"refusing": [], "forced": []} for p in points}
    solves: list[bound.Bound] = []
    shares: list[float] = []
    for seed in seeds:
        started = time.perf_counter()
        for point, pair in bound.at_percents(nodes, protocol.inflate(pods, capacity, ratio, seed), points).items():
            per_seed[point]["refusing"].append(pair["refusing"].percent)
            per_seed[point]["forced"].append(pair["forced"].percent)
            solves += pair.values()
        shares.append(pair["forced"].forced_share)
        progress.done(f"bound seed {seed}", time.perf_counter() - started)
    return {
        "available": True,
        "at": {p: {v: float(np.mean(values)) for v, values in pair.items()} for p, pair in per_seed.items()},
        "per_seed": per_seed,
        # Per seed: 0.95, or less where even the relaxation cannot place every pod arriving before 95%.
        "forced_share": shares,
        "combinations": max(b.combinations for b in solves),
        "grid_milli": max(b.grid for b in solves),
        "solve_s": float(np.mean([b.seconds for b in solves])),
    }


def compare_replay(
    nodes: Sequence[NodeSpec], pods: Sequence[PodSpec], names: Sequence[str], progress: Progress
) -> dict[str, dict[str, Any]]:
    shapes = typical.typical_shapes([p.shape for p in pods])
    _warm_up(nodes, pods, names, shapes)
    t0 = min(float(p.creation or 0.0) for p in pods)
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        run = replay.run_replay(
            nodes,
            pods,
            policies.build(name, shapes=shapes, seed=0),
            progress=progress.runner(f"{name} replay", len(pods)),
        )
        progress.done(f"{name} replay", run.wall_s)
        results[name] = {
            "time_weighted_alloc": run.time_weighted_alloc,
            "pending_mean_s": run.pending_mean_s,
            "pending_p99_s": run.pending_p99_s,
            "failed_pods": run.failed_pods,
            "decisions_per_s": run.decisions / run.wall_s if run.wall_s else math.nan,
            "wall_s": run.wall_s,
            "curve": {f"{(t - t0) / 86400:.3f}": float(a) for t, a in zip(run.times, run.alloc_pct, strict=True)},
        }
    return results


def run_churn(args: argparse.Namespace, seeds: Sequence[int]) -> dict[str, Any]:
    """``--churn``: every policy at every load, means over the seeds (``scheduler.sim.churn``)."""
    names = ["fgd"] if args.policy is None else [n.strip() for n in args.policy.split(",") if n.strip()]
    nodes, pods, source = _inputs(args)
    count = len(churn.sample(pods, args.arrivals or 0))
    durations_from, note = churn.durations_source(pods, pods_file=args.pods, durations_file=args.durations)
    progress = Progress(args.quiet)
    loads = churn.parse_loads(args.churn)
    declared = churn.declared(args.runtime_estimate, args.runtime_missing)
    results = churn.compare(
        nodes,
        pods,
        names,
        loads,
        seeds,
        durations_from=durations_from,
        arrivals=count,
        progress=lambda s, r: progress.done(s, r.wall_s),
        declared=declared,
    )
    declaring = f", {declared.describe()}" if declared is not None else ""
    print(f"churn of {source}{note}: {count} arrivals at loads {args.churn}, seeds {_span(seeds)}{declaring}")
    print(churn.table(results))
    out: dict[str, Any] = {"mode": "churn", "loads": loads, "seeds": seeds, "arrivals": count, "results": results}
    if declared is not None:
        out["runtimes"] = dataclasses.asdict(declared)
    return out


def _write_json(path: str, payload: dict[str, Any]) -> None:
    try:
        report.write_json(path, payload)
    except OSError as exc:
        raise InvalidObject(f"cannot write {path}: {exc.strerror}", obj="gpusched simulate", field="--json") from None
    print(f"wrote {path} (the results as JSON)")


def run_snapshot(args: argparse.Namespace, load_config: Callable[[str | None], snapshot.OperatorSettings]) -> int:
    """``--snapshot``: each ``--config`` on the exported cluster (``scheduler.sim.snapshot``)."""
    configs = [snapshot.settings_of(path, load_config(path)) for path in args.config or []]
    if not configs:
        configs = [snapshot.Settings("built-in", load_config(None).profile)]
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        configs = [dataclasses.replace(c, name=path) for c, path in zip(configs, args.config, strict=True)]
    queues = snapshot.load_queues(args.queues) if args.queues else None
    taken = snapshot.load(args.snapshot)
    results = snapshot.compare(taken, configs, queues)
    print(snapshot.describe(taken))
    print(
        f"queues: {'from ' + ', '.join(args.queues) if args.queues else 'the snapshot' + chr(39) + 's own'} "
        f"({len(taken.queues if queues is None else queues)})"
    )
    print(snapshot.table(results))
    if args.json:
        _write_json(args.json, {"mode": "snapshot", "snapshot": taken.source, "results": results})
    return 0


def run(
    args: argparse.Namespace, *, load_config: Callable[[str | None], snapshot.OperatorSettings] | None = None
) -> int:
    """The command; ``load_config`` reads the operator's config file (``scheduler.k8s.config.load``: the command
    line passes it, as the simulator does not import the operator's package)."""
    check(args)
    chosen = mode(args)
    if chosen == "snapshot":
        if load_config is None:
            raise InvalidObject("--snapshot needs the operator's config loader", obj="gpusched simulate")
        return run_snapshot(args, load_config)
    if chosen == "topology":
        seeds = parse_seeds(TOPOLOGY_SEEDS if args.seeds is None else args.seeds)
        started = time.perf_counter()
        results = scenario_runs.run_topology(seeds, args.quiet)
        labelled = sim_topology.cluster()
        print(
            f"topology scenario: {len(labelled)} nodes (4 blocks x 4 racks x 2 cliques x 4 nodes x 8 GPUs), "
            f"{len(sim_topology.generate(seed=seeds[0]))} jobs per seed, seeds {_span(seeds)}"
        )
        print(sim_topology.table(results))
        print(f"total {time.perf_counter() - started:.1f}s")
        if args.json:
            _write_json(args.json, {"mode": "topology", "seeds": seeds, "results": results})
        return 0
    if chosen == "tenants":
        names = policies.parse_names("default" if args.policy is None else args.policy)
        seeds = parse_seeds(DEFAULT_SEEDS if args.seeds is None else args.seeds)
        results = scenario_runs.run_tenants(names, seeds, args.quiet)
        where = f"{len(tenants.QUEUES)} queues on {len(tenants.cluster())} nodes"
        print(f"tenants scenario: {where}, seeds {_span(seeds)}")
        print(report.tenant_table(results, seeds=len(seeds)))
        if args.json:
            _write_json(args.json, {"mode": "tenants", "seeds": seeds, "results": results})
        return 0
    if chosen == "elastic":
        seeds = parse_seeds(DEFAULT_SEEDS if args.seeds is None else args.seeds)
        results = scenario_runs.run_elastic(seeds, args.quiet)
        print(
            f"elastic scenario: the gang jobs in 2 queues (each guaranteed half), rigid and elastic, "
            f"seeds {_span(seeds)}"
        )
        print(elastic.table(results))
        if args.json:
            _write_json(args.json, {"mode": "elastic", "seeds": seeds, "results": results})
        return 0
    if chosen == "segments":
        seeds = parse_seeds(DEFAULT_SEEDS if args.seeds is None else args.seeds)
        runs = {"segments of 16": [segments.run(s, segments=True) for s in seeds]}
        runs["no segments"] = [segments.run(s, segments=False) for s in seeds]
        summaries = {name: segments.summary(made) for name, made in runs.items()}
        print(f"segments scenario: 8 NVL72-shaped racks (18 nodes x 4 GPUs, one clique each), seeds {_span(seeds)}")
        print(segments.table(summaries, len(seeds)))
        if args.json:
            _write_json(args.json, {"mode": "segments", "seeds": seeds, "results": summaries})
        return 0
    if chosen == "gangs":
        names = policies.parse_names("default" if args.policy is None else args.policy)
        seeds = parse_seeds(DEFAULT_SEEDS if args.seeds is None else args.seeds)
        started = time.perf_counter()
        results = scenario_runs.run_gangs(args, names, seeds)
        print(f"gang scenario: {'jobs from ' + args.jobs if args.jobs else 'built-in jobs'}, seeds {_span(seeds)}")
        print(report.gang_table(results))
        print(f"total {time.perf_counter() - started:.1f}s")
        if args.json:
            _write_json(args.json, {"mode": "gangs", "seeds": seeds, "results": results})
        return 0
    seeds = parse_seeds(DEFAULT_SEEDS if args.seeds is None else args.seeds)
    if chosen == "churn":
        started = time.perf_counter()
        churned = run_churn(args, seeds)
        print(f"total {time.perf_counter() - started:.1f}s")
        if args.json:
            _write_json(args.json, churned)
        return 0
    names = policies.parse_names(",".join(policies.POLICIES) if args.policy is None else args.policy)
    tune = DEFAULT_TUNE if args.tune is None else args.tune
    nodes, pods, source = _inputs(args)
    progress = Progress(args.quiet)
    started = time.perf_counter()
    ends: dict[str, tuple[Cache, list[typical.Shape]]] | None = {} if getattr(args, "dashboard", None) else None
    if args.replay:
        results = compare_replay(nodes, pods, names, progress)
        print(f"replay of {source}: {len(pods)} pods")
        print(report.replay_table(results))
        payload: dict[str, Any] = {"mode": "replay", "results": results}
    else:
        numa = sim_numa.parse_policy(args.numa) if args.numa else api_numa.Policy.NONE
        zoned = None if numa == api_numa.Policy.NONE else numa
        results = compare_tune(nodes, pods, names, tune, seeds, progress, ends=ends, numa=zoned)
        bounds = tune_bounds(nodes, pods, tune, seeds, progress)
        report.headroom(results, bounds)
        key = str(round(tune * 100))
        print(f"{source}: {len(pods)} pods inflated to {tune:g} x GPU capacity, seeds {_span(seeds)}")
        print(report.table(results, key, bounds))
        payload = {"mode": "tune", "ratio": tune, "seeds": seeds, "bound": bounds, "results": results}
        if zoned is not None:
            print()
            print(sim_numa.table(results, names, key, zoned, nodes))
            payload["numa"] = sim_numa.described(zoned, nodes)
    print(f"total {time.perf_counter() - started:.1f}s")
    if args.json:
        _write_json(args.json, payload)
    if ends is not None:
        try:
            Path(args.dashboard).write_text(sim_dashboard.page(ends, title=source))
        except OSError as exc:
            raise InvalidObject(
                f"cannot write {args.dashboard}: {exc.strerror}", obj="gpusched simulate", field="--dashboard"
            ) from None
        print(f"wrote {args.dashboard} (the dashboard's cluster map of each policy)")
    if args.plot:
        try:
            report.plot(args.plot, results, replay=args.replay)
        except OSError as exc:
            raise InvalidObject(
                f"cannot write {args.plot}: {exc.strerror}", obj="gpusched simulate", field="--plot"
            ) from None
        print(f"wrote {args.plot} (the charts)")
    return 0


def _span(seeds: Sequence[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
