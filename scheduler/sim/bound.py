"""The optimum's bound: how much GPU any placement at all could allocate for a cluster and an arrival mix.

A linear-programming relaxation of placement. Nodes are grouped into types (GPU count, GPU model, CPU, memory)
and pods into shapes; the variables are how many pods of each shape go to each node type, and how many GPUs of
each type hold each *combination* of shared-GPU sizes (a multiset of pod sizes summing to at most 1000 milli; only
the maximal ones are needed, since a GPU may leave a slot empty). Per node type the constraints are: its GPUs are
shared by whole-GPU pods and combinations; shared pods of a size fill only the slots of that size that the
combinations open; CPU and memory are summed over its nodes; a pod goes only to a type with the model it allows
and a node large enough for it alone. The objective is the GPU-milli placed.

Any placement (online or offline, with or without moving pods) gives a feasible point, so the optimum is an upper
bound on every policy. Summing CPU and memory over a type's nodes, and letting counts be fractional, is what makes
it a relaxation: it can exceed the best placement (tests/sim/test_bound.py compares it with brute force).

Two variants: pods may be refused (the plain bound), or every pod that arrived before 95% of the GPU capacity
must be placed (``forced``), as FGD and Kubernetes do, which never turn a pod away while it fits somewhere. A pod
that fits on no node even alone is exempt (no policy can place it). Where even the relaxation cannot place every
pod arriving before 95% (a workload whose shared sizes leave GPUs part-empty, or whose CPU runs out first), the
forced prefix is the longest one it can, to the whole percent, and the bound says which (``forced_share``).

Solved by HiGHS through scipy, an optional extra of the simulator (``pip install 'gpusched[sim]'``); the operator
never imports this module. When the sizes make too many combinations, they are rounded *down* to a coarser grid:
the bound stays a bound (any real combination is one of the rounded sizes), only looser, and ``grid`` says so.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from scheduler.api.basics import resources
from scheduler.sim.trace import NodeSpec, PodSpec

WHOLE = 1000
#: Pods arriving before this share of the GPU capacity must be placed in the ``forced`` variant.
FORCED_SHARE = 0.95
#: Combinations enumerated at most per set of sizes; beyond it the sizes are rounded down to a coarser grid.
LIMIT = 50_000
#: Grids (milli) tried in turn when the exact sizes make more than LIMIT combinations.
GRIDS = (1, 10, 25, 50, 100, 125, 250, 500)

INSTALL_HINT = "the bound needs scipy, an optional dependency: pip install 'gpusched[sim]'"


def available() -> bool:
    """Whether the solver is installed."""
    return importlib.util.find_spec("scipy") is not None


@dataclass(frozen=True, slots=True)
class NodeType:
    gpus: int
    model: str
    cpu: int
    memory: int
    count: int


@dataclass(frozen=True, slots=True)
class PodShape:
    cpu: int
    memory: int
    gpus: int
    milli: int
    models: tuple[str, ...]
    count: int
    #: How many of these pods must be placed (the forced variant).
    forced: int = 0

    @property
    def gpu_total(self) -> int:
        return self.gpus * self.milli

    @property
    def shared(self) -> bool:
        return self.gpus == 1 and self.milli < WHOLE


@dataclass(frozen=True, slots=True)
class Bound:
    """The relaxation's optimum for one arrival mix."""

    #: GPU-milli placed at the optimum (NaN when the forced pods cannot all be placed even in the relaxation).
    allocated: float
    capacity: float
    feasible: bool
    #: Shared-GPU combinations in the program, and the grid (milli) their sizes were rounded down to (1: exact).
    combinations: int
    grid: int
    seconds: float
    #: At the optimum: pods per (node type, shape) and GPUs per (node type, combination of sizes), indices into
    #: the program's ``kinds`` and ``shapes``; a combination as its sizes, largest first.
    placement: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)
    gpus: dict[tuple[int, tuple[int, ...]], float] = field(default_factory=dict, repr=False)
    #: The share of the capacity before which every arriving pod was placed (0 when none had to be).
    forced_share: float = 0.0

    @property
    def percent(self) -> float:
        return 100.0 * self.allocated / self.capacity if self.capacity > 0 else math.nan


def node_types(nodes: Sequence[NodeSpec]) -> list[NodeType]:
    counts = Counter((n.gpus, n.model, n.cpu_milli, n.memory_mib) for n in nodes)
    return [NodeType(g, m, c, mem, k) for (g, m, c, mem), k in sorted(counts.items())]


def pod_shapes(pods: Sequence[PodSpec], forced: int = 0) -> list[PodShape]:
    """Shapes of ``pods`` with their counts; the first ``forced`` pods are the ones that must be placed."""
    key = [shape_key(p) for p in pods]
    counts = Counter(key)
    must = Counter(key[:forced])
    return [PodShape(*k, count=n, forced=must[k]) for k, n in sorted(counts.items())]


def maximal_combinations(sizes: Sequence[int], limit: int = LIMIT) -> list[tuple[int, ...]] | None:
    """Every multiset of ``sizes`` (positive milli) summing to at most 1000 to which no size can be added, as
    counts per size (in the order given); None when there are more than ``limit``."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    ranked = [sizes[i] for i in order]
    if not ranked:
        return []
    smallest = ranked[-1]
    found: list[tuple[int, ...]] = []
    counts = [0] * len(ranked)

    def walk(i: int, room: int) -> bool:
        if i == len(ranked) - 1:
            # The smallest size fills what is left: anything less would leave room for one more.
            counts[i] = room // smallest
            by_input = [0] * len(ranked)
            for rank, index in enumerate(order):
                by_input[index] = counts[rank]
            found.append(tuple(by_input))
            return len(found) <= limit
        for c in range(room // ranked[i], -1, -1):
            counts[i] = c
            if not walk(i + 1, room - c * ranked[i]):
                return False
        counts[i] = 0
        return True

    return found if walk(0, WHOLE) else None


def fits(shape: PodShape, kind: NodeType) -> bool:
    """Whether one node of ``kind``, empty, could hold a pod of ``shape``."""
    if shape.cpu > kind.cpu or shape.memory > kind.memory or shape.gpus > kind.gpus:
        return False
    if shape.gpus and shape.models:
        return any(resources.model_matches(m, kind.model) for m in shape.models)
    return True


def _combinations_on_grid(
    size_sets: Sequence[tuple[int, ...]], limit: int
) -> tuple[int, dict[tuple[int, ...], tuple[tuple[int, ...], list[tuple[int, ...]]]]]:
    """For each set of sizes: its sizes rounded down to the finest grid on which every set has at most ``limit``
    maximal combinations (sizes that round to 0 are left out: they take no slot), and those combinations."""
    for grid in GRIDS:
        out = {}
        for sizes in size_sets:
            rounded = tuple(sorted({(s // grid) * grid for s in sizes} - {0}))
            combos = maximal_combinations(rounded, limit)
            if combos is None:
                break
            out[sizes] = (rounded, combos)
        else:
            return grid, out
    raise ValueError(f"shared-GPU sizes make more than {limit} combinations even on a {GRIDS[-1]}-milli grid")


def shape_key(pod: PodSpec) -> tuple[int, int, int, int, tuple[str, ...]]:
    """What makes two pods alike to the relaxation: CPU, memory, GPU count, milli per GPU, allowed models."""
    return (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli if pod.num_gpu else 0, pod.gpu_spec)


@dataclass
class Program:
    """The relaxation's constraints for a cluster and a set of pod shapes, built once and solved for any arrival
    mix of those shapes (a prefix of a workload is one: its other shapes get a count of 0). Rows 0..S-1 hold the
    shapes' counts (between the pods forced and the pods arrived); the others, the node types' capacities."""

    kinds: list[NodeType]
    shapes: list[PodShape]
    index: dict[tuple[int, int, int, int, tuple[str, ...]], int]
    capacity: float
    matrix: object
    objective: npt.NDArray[np.float64]
    lower: npt.NDArray[np.float64]
    upper: npt.NDArray[np.float64]
    #: Whether a pod of each shape fits on an empty node of some type.
    placeable: npt.NDArray[np.bool_]
    #: Column of each (node type, shape) pair a pod of that shape may take, and of each (node type, combination).
    columns: dict[tuple[int, int], int]
    combination_columns: dict[tuple[int, tuple[int, ...]], int]
    combinations: int
    grid: int

    @classmethod
    def build(cls, nodes: Sequence[NodeSpec], pods: Sequence[PodSpec], *, limit: int = LIMIT) -> Program:
        from scipy import sparse

        kinds = node_types(nodes)
        keys = sorted({shape_key(p) for p in pods})
        shapes = [PodShape(*k, count=0) for k in keys]
        allowed = {t: [s for s, shape in enumerate(shapes) if fits(shape, kind)] for t, kind in enumerate(kinds)}
        shared_sizes = {
            t: tuple(sorted({shapes[s].milli for s in allowed[t] if shapes[s].shared})) for t in range(len(kinds))
        }
        grid, rounded = _combinations_on_grid(sorted(set(shared_sizes.values())), limit)
        objective: list[float] = []
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        upper: list[float] = [0.0] * len(shapes)  # the shapes' rows: counts come with each solve

        def row(high: float) -> int:
            upper.append(high)
            return len(upper) - 1

        def put(r: int, c: int, v: float) -> None:
            rows.append(r)
            cols.append(c)
            vals.append(v)

        columns: dict[tuple[int, int], int] = {}
        combination_columns: dict[tuple[int, tuple[int, ...]], int] = {}
        combos_total = 0
        for t, kind in enumerate(kinds):
            gpu_row = row(float(kind.gpus * kind.count)) if kind.gpus else -1
            cpu_row = row(float(kind.cpu * kind.count))
            memory_row = row(float(kind.memory * kind.count))
            sizes, combos = rounded[shared_sizes[t]]
            slot_row = {m: row(0.0) for m in sizes}
            # A node of G GPUs holds at most G // k pods of k GPUs: a cut the summed GPU row alone would miss.
            multi_row = {
                k: row(float(kind.count * (kind.gpus // k)))
                for k in sorted({shapes[s].gpus for s in allowed[t] if shapes[s].gpus > 1})
            }
            for s in allowed[t]:
                shape = shapes[s]
                c = columns[(t, s)] = len(objective)
                objective.append(-float(shape.gpu_total))
                put(s, c, 1.0)
                put(cpu_row, c, float(shape.cpu))
                put(memory_row, c, float(shape.memory))
                if shape.shared:
                    size = (shape.milli // grid) * grid
                    if size:  # rounded to nothing on a coarse grid: takes no slot
                        put(slot_row[size], c, 1.0)
                elif shape.gpus:
                    put(gpu_row, c, float(shape.gpus))
                    if shape.gpus > 1:
                        put(multi_row[shape.gpus], c, 1.0)
            if kind.gpus:
                for combo in combos:
                    c = len(objective)
                    members = sorted((m for m, n in zip(sizes, combo, strict=True) for _ in range(n)), reverse=True)
                    combination_columns[(t, tuple(members))] = c
                    objective.append(0.0)
                    put(gpu_row, c, 1.0)
                    for m, n in zip(sizes, combo, strict=True):
                        if n:
                            put(slot_row[m], c, -float(n))
                combos_total += len(combos)
        placeable = np.zeros(len(shapes), dtype=bool)
        placeable[[s for listed in allowed.values() for s in listed]] = True
        matrix = sparse.csr_array((vals, (rows, cols)), shape=(len(upper), len(objective)))
        return cls(
            kinds,
            shapes,
            {k: s for s, k in enumerate(keys)},
            float(sum(n.gpus for n in nodes) * WHOLE),
            matrix,
            np.asarray(objective),
            np.full(len(upper), -np.inf),
            np.asarray(upper),
            placeable,
            columns,
            combination_columns,
            combos_total,
            grid,
        )

    def solve(self, pods: Sequence[PodSpec], *, forced: int = 0) -> Bound:
        """The optimum for ``pods`` (of this program's shapes): pods may be refused, except the first ``forced``;
        a pod that fits on no node even alone is exempt (no policy places it, and its row has no variable)."""
        from scipy import optimize

        started = time.perf_counter()
        count = np.zeros(len(self.shapes))
        must = np.zeros(len(self.shapes))
        for i, pod in enumerate(pods):
            s = self.index[shape_key(pod)]
            count[s] += 1
            if i < forced:
                must[s] += 1
        lower, upper = self.lower.copy(), self.upper.copy()
        upper[: len(count)] = count
        lower[: len(count)] = np.where(self.placeable, must, 0.0)
        if not self.objective.size:
            return Bound(0.0, self.capacity, True, 0, self.grid, time.perf_counter() - started)
        result = optimize.milp(
            self.objective,
            constraints=optimize.LinearConstraint(self.matrix, lower, upper),
            bounds=optimize.Bounds(0.0, np.inf),
        )
        seconds = time.perf_counter() - started
        if result.status == 2:  # infeasible: the forced pods do not fit even when relaxed
            return Bound(math.nan, self.capacity, False, self.combinations, self.grid, seconds)
        if result.x is None:
            raise RuntimeError(f"the bound's linear program was not solved: {result.message}")
        x: npt.NDArray[np.float64] = result.x
        placement = {key: float(x[c]) for key, c in self.columns.items() if x[c] > 1e-9}
        gpus = {key: float(x[c]) for key, c in self.combination_columns.items() if x[c] > 1e-9}
        return Bound(-float(result.fun), self.capacity, True, self.combinations, self.grid, seconds, placement, gpus)


def solve(nodes: Sequence[NodeSpec], pods: Sequence[PodSpec], *, forced: int = 0, limit: int = LIMIT) -> Bound:
    """The relaxation's optimum for ``pods`` on ``nodes``: pods may be refused, except the first ``forced``."""
    return Program.build(nodes, pods, limit=limit).solve(pods, forced=forced)


def arrived_end(workload: Sequence[PodSpec], capacity: float, percent: int) -> int:
    """How many pods of ``workload`` the allocation curve's value at ``percent`` can have seen: every pod whose
    arrived demand rounds to at most ``percent`` (protocol.alloc_curve), or the whole list at its last point."""
    arrived = np.cumsum([p.gpu_total for p in workload], dtype=np.float64)
    rounded = np.rint(100.0 * arrived / capacity)
    return int(np.searchsorted(rounded, percent, side="right"))


def forced_end(workload: Sequence[PodSpec], capacity: float, share: float = FORCED_SHARE) -> int:
    """How many pods arrive while the arrived demand stays within ``share`` of the capacity."""
    arrived = np.cumsum([p.gpu_total for p in workload], dtype=np.float64)
    return int(np.searchsorted(arrived, share * capacity, side="right"))


def forced_prefix(program: Program, workload: Sequence[PodSpec]) -> tuple[int, float]:
    """How many of the first pods the forced variant places, and before which share of the capacity they arrive:
    those before 95%, or, when even the relaxation cannot place them all, those before the largest whole percent
    it can. A longer prefix only adds pods to place, so feasibility falls once; the search starts just below the
    GPU the relaxation can place from the pods before 95% at all, where the edge usually is."""
    capacity = program.capacity
    must = forced_end(workload, capacity)
    if program.solve(workload[:must], forced=must).feasible:
        return must, FORCED_SHARE

    def feasible(percent: int) -> bool:
        end = forced_end(workload, capacity, percent / 100)
        return program.solve(workload[:end], forced=end).feasible

    high = round(100 * FORCED_SHARE)  # known infeasible
    probe = min(high - 1, math.floor(program.solve(workload[:must]).percent))
    step = 1
    while probe > 0 and not feasible(probe):  # down in growing steps until a feasible prefix
        high, probe, step = probe, max(probe - step, 0), 2 * step
    low = probe  # feasible (0: no GPU pod forced)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if feasible(middle) else (low, middle)
    return forced_end(workload, capacity, low / 100), low / 100


def at_percents(
    nodes: Sequence[NodeSpec], workload: Sequence[PodSpec], percents: Sequence[int]
) -> dict[str, dict[str, Bound]]:
    """Both variants of the bound at each of ``percents`` of arrived demand, as
    ``{"100": {"refusing": .., "forced": ..}}``. The last percent takes the whole workload (the curve's last point
    is its last pod)."""
    program = Program.build(nodes, workload)
    capacity = program.capacity
    must, share = forced_prefix(program, workload)
    out = {}
    for i, percent in enumerate(percents):
        end = len(workload) if i == len(percents) - 1 else arrived_end(workload, capacity, percent)
        prefix = workload[:end]
        forced = replace(program.solve(prefix, forced=min(must, end)), forced_share=share)
        out[str(percent)] = {"refusing": program.solve(prefix), "forced": forced}
    return out
