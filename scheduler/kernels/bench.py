"""Kernel benchmark: nanoseconds per node per pod for every kernel and its NumPy twin.

The cluster is synthetic (8-GPU nodes, six resource columns, partly used); each kernel scores every node for
each of a list of random pods, with the kernels' serial and parallel (all cores) twins. ``numba`` is the one the
kernels use at that node count (parallel from ``PARALLEL_MIN_NODES``). ``balance`` and ``fgd`` are timed in steady
state (per-node quantities cached, as in a run where each placement changes one node), ``balance_cold`` and
``fgd_cold`` with every node's recomputed on each call. The calls of all kernels are timed in interleaved rounds
(see :func:`_time_interleaved`), then those of all twins; each figure is the median of ``pods`` x ``repeat`` calls
timed one by one (about ``pods`` for the FGD twins, which are slow).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from scheduler.kernels import _jit, fgd, fit, layout, reference, scores, synthetic


def _time_interleaved(
    calls: dict[tuple[str, bool], Callable[[int], object]],
    pods: int,
    repeat: int,
    per_round: Mapping[tuple[str, bool], int] | None = None,
) -> dict[tuple[str, bool], float]:
    """Median seconds of one call for each (kernel, all cores?) case, over ``repeat`` rounds of a call for every
    pod, each call timed alone (a median, so that a call that lost its core to another process does not count).

    The rounds of all cases are interleaved: on a machine shared with other work, a burst of load then spreads
    over every kernel's calls (and the median passes over it) instead of landing on all the calls of whichever
    kernel ran at the time. A case in ``per_round`` makes only that many calls a round (the next pods in turn),
    for twins too slow to score every pod every round."""
    for (_, parallel), call in calls.items():
        with _threads(parallel):
            call(0)  # compile / warm up
    times: dict[tuple[str, bool], list[float]] = {case: [] for case in calls}
    for r in range(repeat):
        for case, call in calls.items():
            count = (per_round or {}).get(case, pods)
            with _threads(case[1]):
                for t in range(count):
                    i = (r * count + t) % pods
                    start = time.perf_counter()
                    call(i)
                    times[case].append(time.perf_counter() - start)
    return {case: float(np.median(t)) for case, t in times.items()}


@contextlib.contextmanager
def _threads(parallel: bool) -> Iterator[None]:
    saved = _jit.PARALLEL_MIN_NODES
    _jit.PARALLEL_MIN_NODES = 1 if parallel else 1 << 62
    try:
        yield
    finally:
        _jit.PARALLEL_MIN_NODES = saved


def run(nodes: int = 10_000, pods: int = 20, repeat: int = 3, seed: int = 0) -> dict[str, dict[str, float]]:
    """Figures per kernel; ``nodes``, ``pods`` and ``repeat`` must be at least 1 (``ValueError`` otherwise, before
    anything is allocated or compiled)."""
    for name, value in (("nodes", nodes), ("pods", pods), ("repeat", repeat)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    rng = np.random.default_rng(seed)
    c = synthetic.random_cluster(rng, nodes, resources=6, max_gpus=8)
    c.gpu_count[:] = 8
    c.cap[:, layout.GPU_MILLI] = 8000.0
    c.cap[:, layout.GPU_MEMORY] = 8 * c.gpu_mem_each
    c.used[:, layout.GPU_MILLI] = 8000.0 - c.gpu_free.sum(axis=1)
    c.used[:, layout.GPU_MEMORY] = c.cap[:, layout.GPU_MEMORY] - c.gpu_mem_free.sum(axis=1)
    c.node_model[:] = rng.integers(0, 3, size=nodes)
    typical = synthetic.random_typical(rng, count=35)
    requests = [synthetic.random_request(rng) for _ in range(pods)]
    listed = np.arange(nodes, dtype=np.int64)
    out = np.empty(nodes)
    out2 = np.empty(nodes)
    out_gpu = np.empty(nodes, dtype=np.int64)
    reasons_in = np.zeros(nodes, dtype=np.int8)
    reasons = np.empty(nodes, dtype=np.int8)
    model_ok = np.array([True, False, True])
    weights = np.ones(6)
    most = np.array([False, False, False, True, True, False])
    scarce = np.array([False, False, False, True, True, False])
    coef = np.array([0.4, 0.3, 0.2, 0.1])
    frag_cache = fgd.FragCache(nodes, typical.cpu.shape[0])
    balance_cache = scores.BalanceCache(nodes, c.cap.shape[1])

    def whole(i: int) -> int:
        _, k, m, _ = requests[i]
        return k if m >= 1000 else 0

    def resource_args(i: int) -> tuple[Any, ...]:
        """The arguments the per-resource scores share, for pod ``i``."""
        return listed, c.cap, c.used, requests[i][0], whole(i), c.gpu_mem_each, weights

    def cases(lib: Any) -> dict[str, Callable[[int], object]]:
        return {
            "fit": lambda i: lib.fit(
                c.cap,
                c.used,
                requests[i][0],
                c.gpu_free,
                c.gpu_mem_free,
                c.gpu_count,
                c.node_model,
                model_ok,
                False,
                requests[i][1],
                requests[i][2],
                requests[i][3],
                reasons_in,
                reasons,
            ),
            "spread": lambda i: lib.spread(*resource_args(i), out),
            "binpack": lambda i: lib.binpack(*resource_args(i), out),
            "resource_strategy": lambda i: lib.resource_strategy(*resource_args(i), most, out),
            "scarce_avoidance": lambda i: lib.scarce_avoidance(listed, c.cap, requests[i][0], scarce, out),
            "balance": lambda i: lib.balance(*resource_args(i), coef, 0.9, 0.2, c.gen, balance_cache, out),
            "bestfit": lambda i: lib.bestfit(listed, c.cap, c.used, requests[i][0], 128000.0, 8000.0, out),
            "dotprod": lambda i: lib.dotprod(listed, c.cap, c.used, requests[i][0], 128000.0, 8000.0, out),
            "fgd": lambda i: lib.fgd(
                listed,
                c.cap,
                c.used,
                c.gpu_free,
                c.gpu_mem_free,
                c.gpu_count,
                c.node_model,
                c.gen,
                typical,
                frag_cache,
                requests[i][0][layout.CPU],
                requests[i][1],
                requests[i][2],
                requests[i][3],
                out,
                out2,
                out_gpu,
            ),
        }

    numba_cases = _with_cold(cases(_Kernels), {"balance": balance_cache, "fgd": frag_cache})
    numpy_cases = _with_cold(cases(reference), {"balance": None, "fgd": None})  # the twins keep no cache
    results: dict[str, dict[str, float]] = {}
    default_parallel = nodes >= _jit.PARALLEL_MIN_NODES
    numba_s = _time_interleaved(
        {(name, parallel): call for name, call in numba_cases.items() for parallel in (False, True)}, pods, repeat
    )
    # The twins run on one thread whatever the flag; FGD's take ~60 ms a call, so they make as many calls in all
    # as one round of every pod (at least one a round). Their warm-up calls free FGD's large temporaries, which
    # raises glibc's mmap and trim thresholds: from then on every twin's temporaries come from the heap without
    # page faults, NumPy's best case (each twin timed alone in a fresh process, spread's takes 2.3 times as long).
    numpy_s = _time_interleaved(
        {(name, False): call for name, call in numpy_cases.items()},
        pods,
        repeat,
        {(name, False): max(1, pods // repeat) for name in numpy_cases if name.startswith("fgd")},
    )
    for name in numba_cases:
        serial_s, parallel_s = numba_s[name, False], numba_s[name, True]
        ref_s = numpy_s[name, False]
        jit_s = parallel_s if default_parallel else serial_s
        results[name] = {
            "numba_ns_per_node": jit_s / nodes * 1e9,
            "numpy_ns_per_node": ref_s / nodes * 1e9,
            "speedup": ref_s / jit_s,
            "numba_serial_ns_per_node": serial_s / nodes * 1e9,
            "numba_parallel_ns_per_node": parallel_s / nodes * 1e9,
        }
    return results


def _with_cold(
    cases: dict[str, Callable[[int], object]], caches: dict[str, fgd.FragCache | scores.BalanceCache | None]
) -> dict[str, Callable[[int], object]]:
    """``cases`` with a ``<name>_cold`` case after each kernel named in ``caches``: the same call with the kernel's
    cache emptied first."""
    result = {}
    for name, call in cases.items():
        result[name] = call
        if name in caches:
            result[f"{name}_cold"] = _cold(call, caches[name])
    return result


def _cold(call: Callable[[int], object], cache: fgd.FragCache | scores.BalanceCache | None) -> Callable[[int], object]:
    if cache is None:
        return call

    def run_cold(i: int) -> object:
        cache.seen[:] = -1
        return call(i)

    return run_cold


class _Kernels:
    """The numba kernels under the same names as the twins in ``reference``."""

    fit = staticmethod(fit.fit)
    spread = staticmethod(scores.spread)
    binpack = staticmethod(scores.binpack)
    resource_strategy = staticmethod(scores.resource_strategy)
    scarce_avoidance = staticmethod(scores.scarce_avoidance)
    balance = staticmethod(scores.balance)
    bestfit = staticmethod(scores.bestfit)
    dotprod = staticmethod(scores.dotprod)
    fgd = staticmethod(fgd.fgd)
