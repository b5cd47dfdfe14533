"""The GPUs inside a node and how tightly they connect, from the node annotation ``gpusched.io/gpu-topology``.

The annotation is JSON (schema in docs/topology.md): for each GPU index its NUMA node, its PCIe switch and its
NVLink peers with the number of links. :func:`parse_gpu_topology` reads it and raises :class:`InvalidObject`
naming the annotation and the field; :func:`to_annotation` writes it; ``scheduler.api.devices.nvidia_smi`` builds it
from the
output of ``nvidia-smi topo -m``.

Two GPUs are joined by the tightest :class:`Link` they share: NVLink, then the same PCIe switch, then the same
NUMA node, then anything else (across NUMA nodes, or unknown). :class:`GpuTopology` keeps this as a complete
weighted graph in numpy matrices (:attr:`GpuTopology.link`, :attr:`GpuTopology.nvlinks`); ``networkx.Graph(
topo.adjacency())`` gives it as a networkx graph. It is not held as one here because ``scheduler.api`` imports
the standard library and numpy only (the import-linter contract in pyproject.toml).

Device choice: :func:`tightest_set` picks the GPUs for a pod, :func:`fragmentation_cost` says which fully free
tight groups (:attr:`GpuTopology.groups`) a choice breaks, so that small pods leave tight groups to large ones.
"""

from __future__ import annotations

import enum
import functools
import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduler.api.basics.errors import InvalidObject

ANNOTATION = "gpusched.io/gpu-topology"
SCHEMA_VERSION = 1
#: Above this many candidate sets :func:`tightest_set` turns greedy. C(16, k) <= 12870, so on nodes of up to 16
#: GPUs the choice is always exact.
EXACT_LIMIT = 20_000

I64 = npt.NDArray[np.int64]


class Link(enum.IntEnum):
    """How tightly two GPUs connect, loosest first; the weight of their edge."""

    #: Across NUMA nodes (nvidia-smi ``SYS``), or not known.
    SYSTEM = 1
    #: The same NUMA node (``NODE``, ``PHB``).
    NUMA = 2
    #: The same PCIe switch (``PIX``, ``PXB``): peer traffic does not cross the CPU.
    PCIE = 3
    #: One or more NVLinks (``NV#``), directly or through NVSwitch.
    NVLINK = 4


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    #: The NUMA node the GPU is attached to; -1: not known.
    numa: int = -1
    #: The PCIe switch the GPU sits under (any id, compared for equality); empty: not known or alone.
    pcie: str = ""
    #: ``(peer index, number of NVLinks)``, sorted by peer.
    nvlink: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TightGroup:
    """GPUs that are all pairwise joined by ``link`` or tighter: a maximal NVLink clique, the GPUs under one PCIe
    switch, the GPUs of one NUMA node, or the whole node (``Link.SYSTEM``)."""

    link: Link
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GpuTopology:
    """The GPUs of one node, indexed 0..n-1. Construct it with :meth:`of`, :meth:`uniform` or a parser."""

    gpus: tuple[Gpu, ...]
    #: n x n: the :class:`Link` between each pair of GPUs (0 on the diagonal). Read-only.
    link: I64 = field(init=False, repr=False, compare=False)
    #: n x n: the number of NVLinks between each pair of GPUs. Read-only.
    nvlinks: I64 = field(init=False, repr=False, compare=False)
    #: The tight groups of two GPUs or more, tightest first; a set of GPUs is listed once, with its tightest link.
    groups: tuple[TightGroup, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = _check(self.gpus)
        if problem:
            where, reason = problem
            raise InvalidObject(reason, obj="GPU topology", field=where)
        n = len(self.gpus)
        link = np.full((n, n), int(Link.SYSTEM), dtype=np.int64)
        nvlinks = np.zeros((n, n), dtype=np.int64)
        numa = np.array([gpu.numa for gpu in self.gpus], dtype=np.int64)
        link[(numa[:, None] == numa[None, :]) & (numa[:, None] >= 0)] = int(Link.NUMA)
        pcie = [gpu.pcie for gpu in self.gpus]
        for a, b in itertools.combinations(range(n), 2):
            if pcie[a] and pcie[a] == pcie[b]:
                link[a, b] = link[b, a] = int(Link.PCIE)
        for gpu in self.gpus:
            for peer, count in gpu.nvlink:
                nvlinks[gpu.index, peer] = count
                link[gpu.index, peer] = int(Link.NVLINK)
        np.fill_diagonal(link, 0)
        link.setflags(write=False)
        nvlinks.setflags(write=False)
        object.__setattr__(self, "link", link)
        object.__setattr__(self, "nvlinks", nvlinks)
        object.__setattr__(self, "groups", _tight_groups(self.gpus, nvlinks))

    @classmethod
    def of(cls, gpus: Iterable[Gpu]) -> GpuTopology:
        """A topology from GPUs in any order."""
        return cls(tuple(sorted(gpus, key=lambda gpu: gpu.index)))

    @classmethod
    def uniform(cls, count: int) -> GpuTopology:
        """``count`` GPUs about which nothing is known: every pair is ``Link.SYSTEM``."""
        return cls(tuple(Gpu(index) for index in range(count)))

    def __len__(self) -> int:
        return len(self.gpus)

    def adjacency(self) -> dict[int, dict[int, dict[str, int]]]:
        """The complete graph of the GPUs as a dict of dicts: ``networkx.Graph(topo.adjacency())``. Each edge
        has ``weight`` (the :class:`Link`, an int) and ``nvlinks`` (the number of NVLinks)."""
        n = len(self.gpus)
        return {
            a: {b: {"weight": int(self.link[a, b]), "nvlinks": int(self.nvlinks[a, b])} for b in range(n) if b != a}
            for a in range(n)
        }


def _check(gpus: Sequence[Gpu]) -> tuple[str, str] | None:
    """The first thing wrong with ``gpus`` (a field path inside the annotation, and why), or None."""
    for position, gpu in enumerate(gpus):
        where = f"gpus[{position}]"
        if gpu.index != position:
            return f"{where}.index", f"GPU indices must be 0..{len(gpus) - 1}, each once; found {gpu.index}"
        if gpu.numa < -1:
            return f"{where}.numa", f"{gpu.numa} is not a NUMA node"
        previous = -1
        for peer, count in gpu.nvlink:
            if not 0 <= peer < len(gpus) or peer == gpu.index:
                return f"{where}.nvlink.{peer}", f"GPU {gpu.index} cannot have NVLinks to GPU {peer}"
            if peer <= previous:
                return f"{where}.nvlink.{peer}", "peers must be listed once, in order"
            if count < 1:
                return f"{where}.nvlink.{peer}", f"{count} is not a number of NVLinks >= 1"
            back = dict(gpus[peer].nvlink).get(gpu.index, 0)
            if back != count:
                return (
                    f"{where}.nvlink.{peer}",
                    f"GPU {gpu.index} has {count} NVLinks to GPU {peer}, but GPU {peer} has {back} back",
                )
            previous = peer
    for a, b in itertools.combinations(gpus, 2):
        if a.pcie and a.pcie == b.pcie and a.numa >= 0 and b.numa >= 0 and a.numa != b.numa:
            return (
                f"gpus[{b.index}].numa",
                f"GPUs {a.index} and {b.index} share PCIe switch {a.pcie!r} "
                f"but sit on NUMA nodes {a.numa} and {b.numa}",
            )
    return None


def _tight_groups(gpus: Sequence[Gpu], nvlinks: I64) -> tuple[TightGroup, ...]:
    n = len(gpus)
    found: dict[tuple[int, ...], Link] = {}
    neighbours = [set(np.flatnonzero(nvlinks[a]).tolist()) for a in range(n)]
    for clique in sorted(_maximal_cliques(neighbours)):
        found.setdefault(clique, Link.NVLINK)
    switches: dict[str, list[int]] = {}
    numa_nodes: dict[int, list[int]] = {}
    for gpu in gpus:
        if gpu.pcie:
            switches.setdefault(gpu.pcie, []).append(gpu.index)
        if gpu.numa >= 0:
            numa_nodes.setdefault(gpu.numa, []).append(gpu.index)
    for link, members in ((Link.PCIE, switches.values()), (Link.NUMA, numa_nodes.values())):
        for group in sorted(tuple(indices) for indices in members):
            if len(group) > 1:
                found.setdefault(group, link)
    if n > 1:
        found.setdefault(tuple(range(n)), Link.SYSTEM)
    return tuple(TightGroup(link, gpus) for gpus, link in found.items())


def _maximal_cliques(neighbours: Sequence[set[int]]) -> list[tuple[int, ...]]:
    """Maximal cliques of two vertices or more (Bron–Kerbosch with a pivot); small graphs only."""
    cliques: list[tuple[int, ...]] = []

    def expand(clique: set[int], candidates: set[int], excluded: set[int]) -> None:
        if not candidates and not excluded:
            if len(clique) > 1:
                cliques.append(tuple(sorted(clique)))
            return
        pivot = max(candidates | excluded, key=lambda u: (len(neighbours[u] & candidates), -u))
        for v in sorted(candidates - neighbours[pivot]):
            expand(clique | {v}, candidates & neighbours[v], excluded & neighbours[v])
            candidates = candidates - {v}
            excluded = excluded | {v}

    expand(set(), set(range(len(neighbours))), set())
    return cliques


# --- the annotation -------------------------------------------------------------------------------------------

_GPU_KEYS = ("index", "numa", "pcie", "nvlink")


def parse_gpu_topology(text: str, *, node: str = "") -> GpuTopology:
    """Parse the value of the ``gpusched.io/gpu-topology`` annotation of ``node`` (named in errors)."""
    obj = f"node {node}" if node else "node"
    base = f"metadata.annotations[{ANNOTATION}]"
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, TypeError) as error:
        raise InvalidObject(f"not JSON: {error}", obj=obj, field=base) from None
    if not isinstance(raw, dict):
        raise InvalidObject('must be a JSON object {"gpus": [...]}', obj=obj, field=base)
    version = raw.get("version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise InvalidObject(f"{version!r}: only version {SCHEMA_VERSION} is known", obj=obj, field=f"{base}.version")
    unknown = sorted(set(raw) - {"version", "gpus"})
    if unknown:
        raise InvalidObject(f"unknown keys {unknown}; known: version, gpus", obj=obj, field=base)
    raw_gpus = raw.get("gpus")
    if not isinstance(raw_gpus, list) or not raw_gpus:
        raise InvalidObject("must be a list of at least one GPU", obj=obj, field=f"{base}.gpus")
    gpus: list[Gpu] = []
    for position, raw_gpu in enumerate(raw_gpus):
        where = f"{base}.gpus[{position}]"
        if not isinstance(raw_gpu, dict):
            raise InvalidObject("must be an object with index, numa, pcie, nvlink", obj=obj, field=where)
        unknown = sorted(set(raw_gpu) - set(_GPU_KEYS))
        if unknown:
            raise InvalidObject(f"unknown keys {unknown}; known: {', '.join(_GPU_KEYS)}", obj=obj, field=where)
        index = _count(raw_gpu.get("index"))
        if index is None:
            raise InvalidObject(
                f"{raw_gpu.get('index')!r} is not a GPU index (an integer >= 0)", obj=obj, field=f"{where}.index"
            )
        raw_numa = raw_gpu.get("numa")
        numa = -1 if raw_numa is None else _count(raw_numa)
        if numa is None:
            raise InvalidObject(f"{raw_numa!r} is not a NUMA node (an integer >= 0)", obj=obj, field=f"{where}.numa")
        pcie = raw_gpu.get("pcie", "")
        if not isinstance(pcie, str):
            raise InvalidObject(f"{pcie!r} is not a PCIe switch id (a string)", obj=obj, field=f"{where}.pcie")
        raw_links = raw_gpu.get("nvlink", {})
        if not isinstance(raw_links, dict):
            raise InvalidObject('must be an object {"<peer index>": <links>}', obj=obj, field=f"{where}.nvlink")
        links: dict[int, int] = {}
        for peer_text, count in raw_links.items():
            if not re.fullmatch(r"0|[1-9][0-9]*", peer_text):
                raise InvalidObject(f"{peer_text!r} is not a GPU index", obj=obj, field=f"{where}.nvlink")
            links_count = _count(count)
            if links_count is None or links_count < 1:
                raise InvalidObject(
                    f"{count!r} is not a number of NVLinks >= 1", obj=obj, field=f"{where}.nvlink.{peer_text}"
                )
            links[int(peer_text)] = links_count
        gpus.append(Gpu(index, numa, pcie, tuple(sorted(links.items()))))
    positions = {gpu.index: position for position, gpu in enumerate(gpus)}
    if len(positions) != len(gpus) or set(positions) != set(range(len(gpus))):
        seen: set[int] = set()
        for position, gpu in enumerate(gpus):
            if gpu.index in seen or gpu.index >= len(gpus):
                raise InvalidObject(
                    f"GPU indices must be 0..{len(gpus) - 1}, each once; found {gpu.index}",
                    obj=obj,
                    field=f"{base}.gpus[{position}].index",
                )
            seen.add(gpu.index)
    ordered = sorted(gpus, key=lambda gpu: gpu.index)
    problem = _check(ordered)
    if problem:
        where, reason = problem
        # _check names positions in index order; point at the GPU's position in the annotation instead.
        index = int(where[len("gpus[") : where.index("]")])
        raise InvalidObject(reason, obj=obj, field=f"{base}.gpus[{positions[index]}]{where[where.index(']') + 1 :]}")
    return GpuTopology(tuple(ordered))


def _count(value: object) -> int | None:
    """``value`` if it is an integer >= 0 (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def to_annotation(topo: GpuTopology) -> str:
    """The ``gpusched.io/gpu-topology`` annotation value: compact JSON, unknown fields left out."""
    gpus: list[dict[str, object]] = []
    for gpu in topo.gpus:
        entry: dict[str, object] = {"index": gpu.index}
        if gpu.numa >= 0:
            entry["numa"] = gpu.numa
        if gpu.pcie:
            entry["pcie"] = gpu.pcie
        if gpu.nvlink:
            entry["nvlink"] = {str(peer): count for peer, count in gpu.nvlink}
        gpus.append(entry)
    return json.dumps({"version": SCHEMA_VERSION, "gpus": gpus}, separators=(",", ":"))


# --- device choice --------------------------------------------------------------------------------------------


class SetTightness(NamedTuple):
    """How tight a set of GPUs is; compares as a tuple, tighter is greater. A single GPU counts as tightest."""

    #: The loosest link between two GPUs of the set.
    min_link: int
    #: The sum of the links over all pairs.
    total_link: int
    #: The fewest NVLinks between two GPUs of the set.
    min_nvlinks: int
    #: The sum of NVLinks over all pairs.
    total_nvlinks: int


def set_tightness(topo: GpuTopology, gpus: Sequence[int]) -> SetTightness:
    keys = _tightness(topo, np.array([sorted(gpus)], dtype=np.int64).reshape(1, len(gpus)))
    return SetTightness(*(int(key[0]) for key in keys))


#: Answers of :func:`tightest_set` by (topology's id, free GPUs, k, limit): the topology kept with each (so that
#: its id stays its own) and the set. Nodes of one model ask the same few questions at every placement.
_TIGHTEST: dict[tuple[int, tuple[int, ...], int, int], tuple[GpuTopology, tuple[int, ...]]] = {}
_TIGHTEST_KEPT = 4096


def tightest_set(topo: GpuTopology, free: Sequence[int], k: int, *, exact_limit: int = EXACT_LIMIT) -> tuple[int, ...]:
    """The ``k`` GPUs among ``free`` for a pod that wants ``k``, in ascending order.

    Ranked by :class:`SetTightness` (the loosest pair first: all NVLink, then one PCIe switch, then one NUMA
    node), then by :func:`fragmentation_cost` (least first), then by the lowest indices. Exact when there are at
    most ``exact_limit`` candidate sets (always, on nodes of up to 16 GPUs). Above that, greedy: from each free GPU
    grow a set by adding the GPU that keeps it best ranked, then swap one GPU in and one out while that improves
    it; the best of these sets is returned, which is not proven best. Remembered (the answer depends on nothing else).
    """
    key = (id(topo), tuple(free), k, exact_limit)
    found = _TIGHTEST.get(key)
    if found is not None and found[0] is topo:
        return found[1]
    chosen = _tightest_set(topo, free, k, exact_limit)
    if len(_TIGHTEST) >= _TIGHTEST_KEPT:
        _TIGHTEST.clear()
    _TIGHTEST[key] = (topo, chosen)
    return chosen


def _tightest_set(topo: GpuTopology, free: Sequence[int], k: int, exact_limit: int) -> tuple[int, ...]:
    pool = _free_array(topo, free)
    if not 0 <= k <= len(pool):
        raise ValueError(f"{k} GPUs asked for; {len(pool)} free")
    if k == 0:
        return ()
    members, sizes = _free_groups(topo, pool)
    if math.comb(len(pool), k) <= exact_limit:
        sets = pool[_combinations(len(pool), k)]
        return tuple(int(gpu) for gpu in sets[_best(topo, sets, members, sizes)])
    results = set()
    for seed in pool.tolist():
        chosen = np.array([seed], dtype=np.int64)
        while len(chosen) < k:
            rest = np.setdiff1d(pool, chosen)
            grown = np.sort(np.column_stack([np.tile(chosen, (len(rest), 1)), rest]), axis=1)
            chosen = grown[_best(topo, grown, members, sizes)]
        results.add(_improve(topo, pool, chosen, members, sizes))
    candidates = np.array(sorted(results), dtype=np.int64)
    return tuple(int(gpu) for gpu in candidates[_best(topo, candidates, members, sizes)])


def _improve(topo: GpuTopology, pool: I64, chosen: I64, members: npt.NDArray[np.bool_], sizes: I64) -> tuple[int, ...]:
    """Swap one chosen GPU for one free GPU while that ranks the set better (the check on the greedy choice)."""
    while True:
        rest = np.setdiff1d(pool, chosen)
        swaps = [chosen]
        for position, gpu in itertools.product(range(len(chosen)), rest.tolist()):
            swapped = chosen.copy()
            swapped[position] = gpu
            swaps.append(np.sort(swapped))
        sets = np.array(swaps, dtype=np.int64)
        best = _best(topo, sets, members, sizes, prefer_first=True)
        if best == 0:
            return tuple(int(gpu) for gpu in chosen)
        chosen = sets[best]


def fragmentation_cost(topo: GpuTopology, free: Sequence[int], chosen: Sequence[int]) -> tuple[int, ...]:
    """The sizes, largest first, of the tight groups (:attr:`GpuTopology.groups`) that are fully free now and
    would be left partly free after taking ``chosen``. Compare costs as tuples, less is better: breaking one
    large group costs more than breaking any number of smaller ones, so large groups stay free for large pods.
    ``()``: the choice takes only whole free groups, or GPUs of groups already broken; ``len()``: how many
    groups it breaks."""
    pool = _free_array(topo, free)
    picked = _free_array(topo, chosen)
    if not set(picked.tolist()) <= set(pool.tolist()):
        raise ValueError(f"chosen GPUs {sorted(set(picked.tolist()) - set(pool.tolist()))} are not free")
    members, sizes = _free_groups(topo, pool)
    broken = _broken(picked.reshape(1, -1), members, sizes)[:, 0]
    return tuple(sorted(sizes[broken].tolist(), reverse=True))


def _free_array(topo: GpuTopology, gpus: Sequence[int]) -> I64:
    pool = np.array(sorted(set(gpus)), dtype=np.int64)
    if len(pool) != len(gpus):
        raise ValueError(f"GPUs listed twice: {sorted(gpus)}")
    if len(pool) and not (pool[0] >= 0 and pool[-1] < len(topo)):
        raise ValueError(f"GPU indices {pool.tolist()} outside 0..{len(topo) - 1}")
    return pool


def _free_groups(topo: GpuTopology, pool: I64) -> tuple[npt.NDArray[np.bool_], I64]:
    """The tight groups all of whose GPUs are in ``pool``: a groups x GPUs membership matrix, and their sizes."""
    free = set(pool.tolist())
    whole = [group.gpus for group in topo.groups if free.issuperset(group.gpus)]
    members = np.zeros((len(whole), len(topo)), dtype=np.bool_)
    for row, gpus in enumerate(whole):
        members[row, list(gpus)] = True
    return members, members.sum(axis=1, dtype=np.int64)


def _broken(sets: I64, members: npt.NDArray[np.bool_], sizes: I64) -> npt.NDArray[np.bool_]:
    """groups x sets: whether the set (a row of GPU indices) takes part, but not all, of the group."""
    taken: I64 = members[:, sets].sum(axis=2, dtype=np.int64)
    broken: npt.NDArray[np.bool_] = (taken > 0) & (taken < sizes[:, None])
    return broken


def _tightness(topo: GpuTopology, sets: I64) -> tuple[I64, I64, I64, I64]:
    count, k = sets.shape
    if k < 2:
        zeros = np.zeros(count, dtype=np.int64)
        return np.full(count, int(Link.NVLINK), dtype=np.int64), zeros, zeros, zeros
    first, second = np.triu_indices(k, 1)
    link = topo.link[sets[:, first], sets[:, second]]
    nvlinks = topo.nvlinks[sets[:, first], sets[:, second]]
    return link.min(axis=1), link.sum(axis=1), nvlinks.min(axis=1), nvlinks.sum(axis=1)


def _best(
    topo: GpuTopology, sets: I64, members: npt.NDArray[np.bool_], sizes: I64, *, prefer_first: bool = False
) -> int:
    """The row of the best ranked set (see :func:`tightest_set`). Ties go to the lexicographically lowest set, or
    with ``prefer_first`` to row 0 if it is among them."""
    broken = _broken(sets, members, sizes)
    keys = list(_tightness(topo, sets))
    # Fewer broken groups of the largest size first, then of the next size: the order of fragmentation_cost.
    keys += [-broken[sizes == size].sum(axis=0) for size in sorted(set(sizes.tolist()), reverse=True)]
    rows = np.arange(len(sets))
    for key in keys:
        values = key[rows]
        rows = rows[values == values.max()]
    if prefer_first and rows[0] == 0:
        return 0
    return int(rows[np.lexsort(sets[rows].T[::-1])[0]])


@functools.lru_cache(maxsize=64)
def _combinations(n: int, k: int) -> I64:
    """All k-subsets of range(n), one per row, in lexicographic order. Read-only."""
    count = math.comb(n, k)
    flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), k)), np.int64, count * k)
    flat.setflags(write=False)
    return flat.reshape(count, k)
