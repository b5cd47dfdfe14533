"""The simulator under churn: pods arrive at a given offered GPU load, run for the trace's durations and leave; a pod
that fits nowhere waits in the real scheduling queue and is retried as the loop retries it (on a pod deletion the
queueing hints let through, at the end of its backoff).

Workload (:func:`workload`). Pods arrive in the list's order, one every exponential gap (seeded) of mean
``E[gpu x duration] / (load x cluster GPUs)``: the arrival rate at which the GPU work offered per second is ``load``
times the cluster (rate x mean work / capacity, the offered load of queueing theory). A pod runs for the trace's
``deletion - creation`` seconds; a list without times (the ``multigpu`` ones) draws each pod's duration, seeded,
from the durations of the pods of its request class in a list that has them (the ``default`` list).

Warm start. The openb durations are heavy-tailed (median 9 minutes, mean 7.2 hours, up to 145 days: 94% of the
GPU-seconds are pods of more than 8 hours), so a cluster filled from empty by one pass over a list of 8,152 pods
never leaves its warm-up: at load 1.0 the arrivals span 8.3 hours and the GPUs in use average 7% of the cluster.
So the run starts in the steady state of the offered load instead: at time 0 a population of pods arrives as an
infinite cluster would hold it at that load (M/G/infinity: a Poisson number of mean rate x mean duration, each
drawn from the list with a chance proportional to its duration, with a uniform share of its duration left to run),
whose expected GPUs are ``load`` x the cluster. They are placed through the same queue; at loads near 1 some of
them wait, as they would have in the steady state. Every figure but "initial never placed" is over the arrivals
after time 0 and the window from 0 to the last of them.

Declared run times (:class:`Declared`, ``--runtime-estimate`` and ``--runtime-missing``): each arrival's pod
declares ``spec.activeDeadlineSeconds`` (a hard limit, as users set them: typically 2 to 5 times the run) of its
duration times a factor drawn uniformly from a range (1: exact), rounded up to whole seconds, and read as the
operator reads it (``scheduler.api.objects.run_time.active_deadline``); a given share of the pods declares none.
The draws are seeded apart from the workload's, so the arrivals and durations stay those of the run without them; a
pod of the population at time 0 declares its remaining run time times the factor (as if it started at 0). Without either
option no pod declares one, as before.

Reported per run (:class:`ChurnRun`): time-weighted GPU allocation over the window; wait (placement minus arrival)
p50 / p95 / p99 by request class, a pod still waiting at the end counting its wait so far (a lower bound: it is
also counted in ``never_placed``); moves (pods evicted to make room, each moved pod placed again) per 100 placed
pods; the time-weighted GPUs on 8-GPU nodes with nothing placed on them (room for the next 8-GPU job); with the
``backfill`` action, the GPU-seconds held for the head of the line and left idle per start of a held job, and the pods
that backfilled held room.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import run_time as api_run_time
from scheduler.api.objects.pod import PodRequest
from scheduler.core.actions import registry
from scheduler.core.consolidation.moves import Moves
from scheduler.core.holds import Hold, Kind, union
from scheduler.framework import typical
from scheduler.framework.interface import Decision
from scheduler.framework.profile import BackfillConfig, ConsolidationConfig, ProfileConfig
from scheduler.kernels import layout
from scheduler.sim import jobsim, policies, protocol, trace
from scheduler.sim.trace import NodeSpec, PodSpec

#: The request classes waits are reported by, in the table's order.
CLASSES = ("shared", "1", "2", "4", "8")
#: Pods asking this many whole GPUs or more are also reported together (class ``4+``): the jobs consolidation is for.
LARGE = 4
#: Waits are reported at these percentiles.
PERCENTILES = (50, 95, 99)
#: Offered loads the benchmark runs by default.
LOADS = (0.9, 1.0, 1.1)
#: The GPUs of a node whose emptiness is counted (the largest jobs of the traces ask for 8).
WHOLE_NODE_GPUS = 8
#: With ``+defrag``: how often background defragmentation may empty a node (simulated seconds).
DEFRAG_EVERY_S = 300.0
#: The pod list whose durations a list without times draws from, by default (beside that list).
DEFAULT_LIST = "openb_pod_list_default.csv"


def parse_loads(raw: str) -> list[float]:
    """``--churn``'s comma-separated offered loads."""
    try:
        loads = [float(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise InvalidObject(
            f"{raw!r} is not a list of loads like 0.9,1.0", obj="gpusched simulate", field="--churn"
        ) from None
    if not loads or not all(0 < x <= 10 for x in loads):
        raise InvalidObject(f"{raw!r}: every load is in (0, 10]", obj="gpusched simulate", field="--churn")
    return loads


def durations_source(
    pods: Sequence[PodSpec], *, pods_file: str, durations_file: str | None
) -> tuple[list[PodSpec] | None, str]:
    """Where a list without times draws its durations (``--durations``, else the ``default`` list beside
    ``pods_file``), loaded, and a note saying so; (None, "") for a list with times."""
    if has_times(pods):
        return None, ""
    raw = durations_file or str(Path(pods_file).with_name(DEFAULT_LIST))
    if not Path(raw).is_file():
        raise InvalidObject(
            f"{pods_file} has no creation and deletion times: name a pod list that has them (no file {raw})",
            obj="gpusched simulate",
            field="--durations",
        )
    return trace.load_pods(raw), f", durations drawn from {raw}"


def request_class(spec: PodSpec) -> str:
    """``cpu`` (no GPU), ``shared`` (part of one GPU), else the whole GPUs asked for."""
    if spec.num_gpu == 0:
        return "cpu"
    if spec.gpu_milli < layout.WHOLE:
        return "shared"
    return str(spec.num_gpu)


def sample(pods: Sequence[PodSpec], count: int) -> list[PodSpec]:
    """``count`` pods spread evenly over the list, in its order (the ``multigpu`` lists append their extra multi-GPU
    pods at the end: the first ``count`` would leave them out)."""
    if count <= 0 or count >= len(pods):
        return list(pods)
    return [pods[i * len(pods) // count] for i in range(count)]


def has_times(pods: Sequence[PodSpec]) -> bool:
    return all(p.creation is not None and p.deletion is not None for p in pods)


def own_durations(pods: Sequence[PodSpec]) -> list[float]:
    """Each pod's ``deletion - creation`` seconds (the list must have both times on every pod)."""
    return [max(0.0, float(p.deletion or 0.0) - float(p.creation or 0.0)) for p in pods]


def drawn_durations(pods: Sequence[PodSpec], source: Sequence[PodSpec], rng: np.random.Generator) -> list[float]:
    """A duration for each pod, drawn from the durations of ``source``'s pods of its request class (of all of
    ``source``'s pods where it has none of that class)."""
    if not source or not has_times(source):
        raise InvalidObject(
            "the durations are drawn from a pod list with creation_time and deletion_time on every pod",
            obj="gpusched simulate --churn",
            field="--durations",
        )
    everything = np.array(own_durations(source))
    by_class: dict[str, np.ndarray] = {}
    for cls in {request_class(p) for p in source}:
        by_class[cls] = np.array([d for p, d in zip(source, everything, strict=True) if request_class(p) == cls])
    return [float(rng.choice(by_class.get(request_class(p), everything))) for p in pods]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One pod of the run: when it arrives and how long it runs once placed."""

    name: str
    spec: PodSpec
    at: float
    duration: float
    #: Part of the steady-state population placed at time 0 (not counted in the waits).
    initial: bool = False
    #: The ``spec.activeDeadlineSeconds`` its pod declares (:class:`Declared`); None: none.
    deadline: int | None = None


@dataclass(frozen=True, slots=True)
class Declared:
    """How the run's pods declare their run times (see the module notes): a factor drawn from ``low``..``high``
    times the duration, none for a share ``missing`` of the pods."""

    low: float = 1.0
    high: float = 1.0
    missing: float = 0.0

    def describe(self) -> str:
        factor = "exact" if self.low == self.high == 1.0 else f"x{self.low:g}-{self.high:g}"
        return f"run times declared {factor}, {self.missing:.0%} without"


def declared(estimate: str | None, missing: str | None) -> Declared | None:
    """``--runtime-estimate`` and ``--runtime-missing`` as a run's :class:`Declared` (None: neither given)."""
    if estimate is None and missing is None:
        return None
    low, high = parse_estimate(estimate) if estimate is not None else (1.0, 1.0)
    return Declared(low, high, parse_missing(missing) if missing is not None else 0.0)


def parse_estimate(raw: str) -> tuple[float, float]:
    """``--runtime-estimate``: a factor (``1``: exact) or a range ``LOW-HIGH``, each >= 1 (a deadline below the run
    would end the pod before it is done, which the simulator does not model)."""
    parts = raw.split("-")
    try:
        low, high = (float(parts[0]), float(parts[-1])) if len(parts) in (1, 2) else (math.nan, math.nan)
    except ValueError:
        low = high = math.nan
    if not (1 <= low <= high < math.inf):
        raise InvalidObject(
            f"{raw!r} is not a factor >= 1 or a range like 2-5", obj="gpusched simulate", field="--runtime-estimate"
        )
    return low, high


def parse_missing(raw: str) -> float:
    """``--runtime-missing``: the share of the pods that declare no run time, in [0, 1]."""
    try:
        share = float(raw)
    except ValueError:
        share = math.nan
    if not 0 <= share <= 1:
        raise InvalidObject(f"{raw!r} is not a share in [0, 1]", obj="gpusched simulate", field="--runtime-missing")
    return share


def declare(load: Workload, declared: Declared, *, seed: int) -> Workload:
    """``load`` with each arrival's declared deadline drawn (seeded by ``seed`` apart from the workload's draws)."""
    rng = np.random.default_rng([seed, 43])
    count = len(load.arrivals)
    factors = rng.uniform(declared.low, declared.high, count)
    without = rng.random(count) < declared.missing
    arrivals = [
        dataclasses.replace(a, deadline=None if none else max(1, math.ceil(a.duration * factor)))
        for a, factor, none in zip(load.arrivals, factors.tolist(), without.tolist(), strict=True)
    ]
    return dataclasses.replace(load, arrivals=arrivals)


@dataclass(frozen=True)
class Workload:
    arrivals: list[Arrival]
    #: The end of the measured window (the last arrival).
    horizon: float
    #: Arrivals per second.
    rate: float = 0.0
    load: float = 0.0


def workload(
    pods: Sequence[PodSpec],
    *,
    gpu_capacity: float,
    load: float,
    seed: int,
    durations: Sequence[float] | None = None,
    warm: bool = True,
    arrivals: int = 0,
) -> Workload:
    """The run's pods (see the module's note). ``gpu_capacity`` in GPUs; ``durations`` per pod of ``pods`` (their
    own times when None); ``arrivals``: that many pods spread evenly over ``pods`` arrive (:func:`sample`; 0: all),
    while the population at time 0 is drawn from all of ``pods`` (drawn from a small sample, a pod of a very long
    duration stood for most of it: one 1-GPU pod of 300 was 7,201 of the 9,381 pods at time 0)."""
    if not 0 < load <= 10:
        raise InvalidObject(f"{load} is not a load in (0, 10]", obj="gpusched simulate", field="--churn")
    if durations is None:
        durations = own_durations(pods)
    d = np.asarray(durations, dtype=float)
    gpus = np.array([p.gpu_total for p in pods], dtype=float) / layout.WHOLE
    chosen = np.arange(len(pods)) if not 0 < arrivals < len(pods) else np.arange(arrivals) * len(pods) // arrivals
    work = float((gpus[chosen] * d[chosen]).mean())
    if work <= 0 or float((gpus * d).mean()) <= 0:
        raise InvalidObject(
            "the pods ask for no GPU-seconds: no load to scale", obj="gpusched simulate", field="--pods"
        )
    rate = load * gpu_capacity / work
    rng = np.random.default_rng([seed, 27])
    run: list[Arrival] = []
    if warm and d.sum() > 0:
        # The whole list's steady state at the same load: as many pods as its own rate would keep running.
        count = int(rng.poisson(load * gpu_capacity * float(d.mean()) / float((gpus * d).mean())))
        picks = rng.choice(len(pods), size=count, p=d / d.sum())
        left = rng.random(count)
        for k, (i, share) in enumerate(zip(picks, left, strict=True)):
            run.append(Arrival(f"{pods[i].name}@{k}", pods[i], 0.0, float(share * d[i]), initial=True))
    at = np.cumsum(rng.exponential(1.0 / rate, len(chosen)))
    for t, i in zip(at, chosen.tolist(), strict=True):
        run.append(Arrival(f"{pods[i].name}#{i}", pods[i], float(t), float(d[i])))
    return Workload(run, float(at[-1]) if len(at) else 0.0, rate=rate, load=load)


@dataclass
class ChurnRun:
    time_weighted_alloc: float
    #: Per request class: count, and wait p50 / p95 / p99 in seconds.
    waits: dict[str, dict[str, float]]
    placed: int
    never_placed: int
    initial_never_placed: int
    moves: int
    moves_per_100_placed: float
    free_whole_node_gpus: float
    cycles: int
    wall_s: float
    events: dict[str, int]
    #: Consolidation's move-plan searches run, by verdict (plan, impossible, out of reach), and the searches a
    #: remembered "no plan" spared.
    searches: dict[str, int] = dataclasses.field(default_factory=dict)
    searches_recalled: int = 0
    #: Backfill (``fgd+backfill``): the jobs that started on room held for them, the GPU-seconds of held room left
    #: idle per such start, and the pods placed on room held for another job (their run time ends in time).
    held_starts: int = 0
    held_idle_gpu_s_per_start: float = 0.0
    backfilled: int = 0


class ChurnSimulation(jobsim.JobSimulation):
    """Each pod is a job of its own, a ReplicaSet's pod (consolidation may move it); it departs ``duration`` seconds
    after it is placed. A moved pod's replacement (a new pod of the same controller) runs for what the moved pod
    had left to run, and its arrival stays the moved pod's: its waits count once, from its first arrival."""

    def __init__(self, nodes: Sequence[NodeSpec], load: Workload, config: ProfileConfig) -> None:
        super().__init__((n.info() for n in nodes), config)
        self.by_name = {a.name: a for a in load.arrivals}
        self.horizon = load.horizon
        self.capacity = float(sum(n.gpus for n in nodes)) * layout.WHOLE
        self.requests = {
            a.name: dataclasses.replace(
                a.spec.request(a.name),
                owner=f"replicaset/{a.name}",
                owner_kind="ReplicaSet",
                created=a.at,
                run_time=api_run_time.active_deadline(a.deadline) if a.deadline is not None else None,
            )
            for a in load.arrivals
        }
        #: When each pod was first placed; when each running pod ends; what a moved pod has left to run.
        self.first_placed: dict[str, float] = {}
        self.ends: dict[str, float] = {}
        self.left: dict[str, float] = {a.name: a.duration for a in load.arrivals}
        #: A replacement's name -> the name the pod first arrived under.
        self.origin: dict[str, str] = {}
        self.running = 0.0
        self.moves = 0
        self.area = 0.0
        self.free_area = 0.0
        self.free_now = self._free_whole_node_gpus()
        #: Backfill's figures: held room idle now (GPUs) and over the window (GPU-seconds), the jobs ever held.
        self.held_idle_now = 0.0
        self.held_idle_area = 0.0
        self.ever_held: set[str] = set()
        self.held_at_step: list[Hold] = []
        self.held_starts = 0
        self.backfilled = 0
        self.last = 0.0
        a = self.cache.arrays
        self._whole_nodes = a.gpu_count == WHOLE_NODE_GPUS
        for arrival in load.arrivals:
            self.arrive(arrival.name, arrival.at)

    def _free_whole_node_gpus(self) -> float:
        a = self.cache.arrays
        empty = (a.gpu_count == WHOLE_NODE_GPUS) & (a.used[:, layout.GPU_MILLI] <= 0.0)
        return float(empty.sum() * WHOLE_NODE_GPUS)

    def advance(self, t: float) -> None:
        end = min(t, self.horizon)
        if end > self.last:
            self.area += self.running * (end - self.last)
            self.free_area += self.free_now * (end - self.last)
            self.held_idle_area += self.held_idle_now * (end - self.last)
            self.last = end

    def arrived(self, name: str) -> None:
        self.submit([self.requests[name]], None)

    def departed(self, name: str) -> None:
        if name not in self.ends:
            return  # moved meanwhile: its replacement departs in its stead
        self._take_out(name)
        self.ends.pop(name, None)
        self.pods_deleted()

    def _take_out(self, name: str) -> None:
        self.remove([self.requests[name]], None)
        self.running -= self.by_name[name].spec.gpu_total

    def replaced(self, old: PodRequest, new: PodRequest) -> None:
        # The jobs' loop has removed the moved pod from the cache and the loop already.
        name = old.name
        if name in self.ends:
            self.left[new.name] = max(0.0, self.ends.pop(name) - self.now)
            self.running -= self.by_name[name].spec.gpu_total
        else:
            self.left[new.name] = self.left[name]
        self.by_name[new.name] = self.by_name[name]
        self.requests[new.name] = new
        self.origin[new.name] = self.origin.get(name, name)
        self.moves += 1

    def placed(self, decision: Decision) -> None:
        key = decision.pod.key
        if key in self.ever_held:
            self.held_starts += 1
        slot = self.cache.slot_of(decision.node)
        # Against the holds kept when the step began (a binding is told after the step's later cycles, which may
        # have held the node it took since).
        if slot is not None and any(
            h.job != key and slot < h.slots.shape[0] and h.slots[slot] and self.loop.holds.get(Kind.HEAD, h.job)
            for h in self.held_at_step
        ):
            self.backfilled += 1
        name = decision.pod.name
        self.first_placed.setdefault(self.origin.get(name, name), self.now)
        self.ends[name] = self.now + self.left[name]
        self.running += self.by_name[name].spec.gpu_total
        if self.ends[name] <= self.horizon:
            # Past the window nothing is measured: the run ends before, at the last arrival.
            self.depart(name, self.left[name])

    def stepped(self, *, bound: int) -> None:
        self.free_now = self._free_whole_node_gpus()
        held = self.held_at_step = self.loop.holds.of_kind(Kind.HEAD)
        self.ever_held.update(h.job for h in held)
        mask = union([h.slots for h in held])
        if mask is None:
            self.held_idle_now = 0.0
            return
        a = self.cache.arrays
        size = min(mask.shape[0], a.slots)
        self.held_idle_now = float((a.gpu_free[:size][mask[:size]] >= layout.WHOLE).sum())

    def finished(self) -> bool:
        return self.now >= self.horizon

    def result(self, wall_s: float) -> ChurnRun:
        self.advance(self.horizon)
        waits: dict[str, list[float]] = {}
        never = 0
        for key, arrival in self.by_name.items():
            if arrival.initial or key in self.origin:
                continue
            start = self.first_placed.get(arrival.name)
            if start is None or start > self.horizon:  # a backoff wake-up taken after the window
                never += 1
                start = self.horizon
            cls = request_class(arrival.spec)
            waits.setdefault(cls, []).append(start - arrival.at)
            if cls not in ("cpu", "shared") and arrival.spec.num_gpu >= LARGE:
                waits.setdefault(f"{LARGE}+", []).append(start - arrival.at)
        span = max(self.horizon, 1e-9)
        placed = len(self.first_placed)
        moves = self.loop.action_state(Moves)
        return ChurnRun(
            time_weighted_alloc=100.0 * self.area / (span * self.capacity),
            waits={cls: _wait_figures(values) for cls, values in waits.items()},
            placed=placed,
            never_placed=never,
            initial_never_placed=sum(
                1 for k, a in self.by_name.items() if a.initial and k not in self.origin and k not in self.first_placed
            ),
            moves=self.moves,
            moves_per_100_placed=100.0 * self.moves / placed if placed else math.nan,
            free_whole_node_gpus=self.free_area / span,
            cycles=self.cycles,
            wall_s=wall_s,
            events=self.log.count,
            searches=dict(moves.verdicts) if moves is not None else {},
            searches_recalled=moves.memo.recalled if moves is not None else 0,
            held_starts=self.held_starts,
            held_idle_gpu_s_per_start=self.held_idle_area / self.held_starts if self.held_starts else math.nan,
            backfilled=self.backfilled,
        )


def _wait_figures(values: Sequence[float]) -> dict[str, float]:
    w = np.asarray(values, dtype=float)
    figures = {"count": float(w.size)}
    for p in PERCENTILES:
        figures[f"p{p}"] = float(np.percentile(w, p)) if w.size else math.nan
    return figures


def run(nodes: Sequence[NodeSpec], load: Workload, config: ProfileConfig) -> ChurnRun:
    started = time.perf_counter()
    sim = ChurnSimulation(nodes, load, config)
    sim.run()
    return sim.result(time.perf_counter() - started)


def mean_of(runs: Sequence[ChurnRun]) -> dict[str, object]:
    """The mean over seeds of every figure (a wait percentile: the mean of the seeds' percentiles)."""
    classes = sorted({c for r in runs for c in r.waits}, key=_class_order)
    waits = {
        cls: {
            key: float(np.nanmean([r.waits[cls][key] for r in runs if cls in r.waits]))
            for key in ("count", *(f"p{p}" for p in PERCENTILES))
        }
        for cls in classes
    }
    scalar = (
        "time_weighted_alloc",
        "placed",
        "never_placed",
        "initial_never_placed",
        "moves",
        "moves_per_100_placed",
        "free_whole_node_gpus",
        "cycles",
        "wall_s",
        "held_starts",
        "backfilled",
    )
    out: dict[str, object] = {key: float(np.mean([getattr(r, key) for r in runs])) for key in scalar}
    out["waits"] = waits
    out["seeds"] = len(runs)
    out["per_seed_alloc"] = [r.time_weighted_alloc for r in runs]
    out["searches"] = {
        v: float(np.mean([r.searches.get(v, 0) for r in runs]))
        for v in sorted({*(k for r in runs for k in r.searches)})
    }
    out["searches_recalled"] = float(np.mean([r.searches_recalled for r in runs]))
    out["held_idle_gpu_s_per_start"] = (
        float(np.nanmean([r.held_idle_gpu_s_per_start for r in runs]))
        if any(math.isfinite(r.held_idle_gpu_s_per_start) for r in runs)
        else math.nan
    )
    return out


def _class_order(cls: str) -> tuple[int, int]:
    if cls in ("cpu", "shared"):
        return (0 if cls == "cpu" else 1, 0)
    return (2, int(cls.rstrip("+")) * 2 + cls.endswith("+"))


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "n/a"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def table(results: Mapping[str, Mapping[str, Mapping[str, object]]]) -> str:
    """One row per policy and load: the figures, then the wait p50 / p95 / p99 of each request class."""
    head = f"{'policy':<22} {'load':>5} {'alloc':>7} {'never':>6} {'moves/100':>9} {'free8 GPUs':>10}"
    for cls in CLASSES:
        head += f"  {'wait ' + cls + ' p50/p95/p99':>22}"
    lines = [head]
    for policy, by_load in results.items():
        for load, r in by_load.items():
            waits = r["waits"]
            assert isinstance(waits, Mapping)
            row = (
                f"{policy:<22} {load:>5} {float(r['time_weighted_alloc']):>6.2f}% {float(r['never_placed']):>6.1f} "  # type: ignore[arg-type]
                f"{float(r['moves_per_100_placed']):>9.2f} {float(r['free_whole_node_gpus']):>10.1f}"  # type: ignore[arg-type]
            )
            for cls in CLASSES:
                w = waits.get(cls)
                cell = "/".join(_duration(float(w[f"p{p}"])) for p in PERCENTILES) if w else "-"
                row += f"  {cell:>22}"
            lines.append(row)
    lines.append(
        "alloc: GPUs allocated, time-weighted over the arrivals' window; never: arrivals still waiting at its end; "
        "moves/100: pods moved per 100 placed; free8 GPUs: time-weighted GPUs on 8-GPU nodes with nothing on them; "
        "wait: placement minus arrival by request class (shared GPU, 1/2/4/8 GPUs), a pod still waiting counting "
        "its wait so far; means over the seeds"
    )
    return "\n".join(lines)


def profile(
    name: str,
    *,
    shapes: Sequence[typical.Shape],
    seed: int,
    consolidation: ConsolidationConfig | None = None,
    backfill: BackfillConfig | None = None,
) -> ProfileConfig:
    """A policy of the simulator (``fgd``) and the session's actions after ``allocate`` each named after a ``+``
    (``fgd+consolidate``); ``+defrag`` adds background defragmentation (``scheduler.core.consolidation.defrag``, every
    :data:`DEFRAG_EVERY_S` simulated seconds, within the profile's default pods an hour) to ``consolidate``. Without
    any, the pod that does not fit only waits. (One queue at one priority gives reclaim and preempt nothing to do,
    and the run has no evictor for them.) ``consolidation``: the consolidate action's knobs (default: the packaged
    profile's); ``backfill``: the backfill action's (``fgd+backfill``: the head of the line holds the nodes that free
    soonest, and pods whose declared run time ends in time use them meanwhile; default: the packaged profile's)."""
    base, *extra = name.split("+")
    policies.parse_names(base)
    defrag = "defrag" in extra
    actions = ("allocate", *(e for e in extra if e != "defrag"))
    for action in extra:
        if (action not in registry.ACTIONS and action != "defrag") or extra.count(action) > 1:
            raise InvalidObject(
                f"{name!r}: {action!r} is not an action after allocate nor defrag "
                f"(known: {', '.join(a for a in registry.ACTIONS if a != registry.FIRST)}, defrag)",
                obj="gpusched simulate",
                field="--policy",
            )
    if defrag and "consolidate" not in actions:
        raise InvalidObject(
            f"{name!r}: defrag moves pods as consolidate does: name both (fgd+consolidate+defrag)",
            obj="gpusched simulate",
            field="--policy",
        )
    config = policies.build(base, shapes=shapes, seed=seed)
    consolidation = consolidation or config.consolidation
    if defrag:
        consolidation = dataclasses.replace(consolidation, defragment_every_s=DEFRAG_EVERY_S)
    return dataclasses.replace(
        config,
        name=name,
        actions=tuple(a for a in registry.ACTIONS if a in actions),
        consolidation=consolidation,
        backfill=backfill or config.backfill,
    )


def compare(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    names: Sequence[str],
    loads: Sequence[float],
    seeds: Sequence[int],
    *,
    durations_from: Sequence[PodSpec] | None = None,
    arrivals: int = 0,
    progress: Callable[[str, ChurnRun], None] | None = None,
    consolidation: ConsolidationConfig | None = None,
    declared: Declared | None = None,
    backfill: BackfillConfig | None = None,
) -> dict[str, dict[str, dict[str, object]]]:
    """Every policy at every load, the mean over ``seeds``; a seed gives every policy the same arrivals, durations
    and node order. ``durations_from``: where a list without times draws its durations (see :func:`workload`);
    ``consolidation``: the knobs of the policies that consolidate (default: the packaged profile's), ``backfill``: of
    those that backfill; ``declared``:
    how the pods declare their run times (None: they declare none)."""
    for name in names:
        profile(name, shapes=[], seed=0)  # a bad name is refused before any run
    shapes = typical.typical_shapes([p.shape for p in pods])
    capacity = float(sum(n.gpus for n in nodes))
    if capacity <= 0:
        raise InvalidObject("the cluster has no GPUs", obj="gpusched simulate", field="--nodes")
    timed = has_times(pods)
    results: dict[str, dict[str, dict[str, object]]] = {name: {} for name in names}
    for load in loads:
        runs: dict[str, list[ChurnRun]] = {name: [] for name in names}
        for seed in seeds:
            rng = np.random.default_rng([seed, 2027])
            durations = None if timed else drawn_durations(pods, durations_from or (), rng)
            run_pods = workload(
                pods, gpu_capacity=capacity, load=load, seed=seed, durations=durations, arrivals=arrivals
            )
            if declared is not None:
                run_pods = declare(run_pods, declared, seed=seed)
            seed_nodes = protocol.tie_order(nodes, seed)
            for name in names:
                config = profile(name, shapes=shapes, seed=seed, consolidation=consolidation, backfill=backfill)
                result = run(seed_nodes, run_pods, config)
                runs[name].append(result)
                if progress is not None:
                    progress(f"{name} load {load:g} seed {seed}", result)
        for name in names:
            results[name][f"{load:g}"] = mean_of(runs[name])
    return results
