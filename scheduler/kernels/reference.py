"""NumPy twins of the kernels: the same names, arguments and results, written for clarity over speed.

The tests compare every kernel with its twin on random clusters; the benchmark times both. A twin takes its
kernel's type from the kernel (:func:`_twin_of`), which checks at import that the two take the same arguments.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from scheduler.kernels import fgd as fgd_kernel
from scheduler.kernels import fit as fit_kernel
from scheduler.kernels import layout, scores
from scheduler.kernels.fgd import TypicalPods

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

K = TypeVar("K", bound=Callable[..., Any])


def _twin_of(kernel: K) -> Callable[[Callable[..., Any]], K]:
    """The twin, typed as ``kernel``; raises TypeError when their arguments differ in name, order or kind."""

    def check(twin: Callable[..., Any]) -> K:
        def arguments(func: Callable[..., Any]) -> list[tuple[str, Any]]:
            return [(p.name, p.kind) for p in inspect.signature(func).parameters.values()]

        if arguments(twin) != arguments(kernel):
            raise TypeError(f"the NumPy twin {twin.__name__} does not take the arguments of its kernel")
        return cast(K, twin)

    return check


def _requests(nodes: I64, req: F64, whole_k: int, gpu_mem_each: F64) -> F64:
    rq = np.broadcast_to(req, (nodes.shape[0], req.shape[0])).copy()
    if whole_k > 0:
        rq[:, layout.GPU_MEMORY] += whole_k * gpu_mem_each[nodes]
    return rq


@_twin_of(fit_kernel.fit)
def fit(
    cap,
    used,
    req,
    gpu_free,
    gpu_mem_free,
    gpu_count,
    node_model,
    model_ok,
    any_model,
    k,
    m,
    gmem,
    node_reason,
    out,
    *,
    nodes=None,
):
    del nodes  # the twin goes over every row
    n_nodes, n_res = cap.shape
    reason = node_reason.astype(np.int64)
    plain = np.ones(n_res, dtype=bool)
    plain[[layout.GPU_MILLI, layout.GPU_MEMORY]] = False
    short = (req > 0) & (used + req > cap) & plain
    first = np.where(short.any(axis=1), short.argmax(axis=1) + layout.RESOURCE, layout.FIT)
    reason = np.where(reason == layout.FIT, first, reason)
    if k > 0:
        slots = np.arange(gpu_free.shape[1]) < gpu_count[:, None]
        model_bad = np.zeros(n_nodes, dtype=bool)
        if not any_model:
            known = node_model >= 0
            model_bad = ~known.copy()
            model_bad[known] = ~model_ok[node_model[known]]
        if m >= layout.WHOLE:
            enough = ((gpu_free >= layout.WHOLE) & slots).sum(axis=1) >= k
            gpu_reason = np.where(enough, layout.FIT, layout.GPU_COUNT)
        else:
            share = (gpu_free >= m) & slots
            found = (share & ((gpu_mem_free >= gmem) if gmem > 0 else True)).any(axis=1)
            gpu_reason = np.where(
                found, layout.FIT, np.where(share.any(axis=1), layout.GPU_MEMORY_SHORT, layout.GPU_SHARE)
            )
        gpu_reason = np.where(model_bad, layout.GPU_MODEL, gpu_reason)
        gpu_reason = np.where(gpu_count < k, layout.GPU_COUNT, gpu_reason)
        reason = np.where(reason == layout.FIT, gpu_reason, reason)
    out[:] = reason
    return out


def _weighted_mean(values: F64, weights: F64) -> F64:
    total = weights.sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    result: F64 = np.where(total > 0, 100.0 * (values * weights).sum(axis=1) / safe, 0.0)
    return result


def _allocated(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, every_column, out):
    """Per column the used (``most``) or free share after placement, weighted over the columns the node has that
    the pod requests, or with ``every_column`` all it has."""
    c, u = cap[nodes], used[nodes]
    rq = _requests(nodes, req, whole_k, gpu_mem_each)
    on = (c > 0) & ((rq > 0) | every_column)
    share = np.where(most, u + rq, c - u - rq) / np.where(c > 0, c, 1.0)
    out[:] = _weighted_mean(np.where(c > 0, share, 0.0), np.where(on, weights, 0.0))
    return out


@_twin_of(scores.spread)
def spread(nodes, cap, used, req, whole_k, gpu_mem_each, weights, out):
    least = np.zeros(req.shape, dtype=bool)
    return _allocated(nodes, cap, used, req, whole_k, gpu_mem_each, weights, least, True, out)


@_twin_of(scores.binpack)
def binpack(nodes, cap, used, req, whole_k, gpu_mem_each, weights, out):
    most = np.ones(req.shape, dtype=bool)
    return _allocated(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, False, out)


@_twin_of(scores.resource_strategy)
def resource_strategy(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, out):
    return _allocated(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, False, out)


@_twin_of(scores.scarce_avoidance)
def scarce_avoidance(nodes, cap, req, scarce, out):
    has = cap[nodes] > 0
    wasted = has & scarce & (req <= 0)
    n_has = has.sum(axis=1)
    out[:] = np.where(n_has > 0, 100.0 * (n_has - wasted.sum(axis=1)) / np.maximum(n_has, 1), 100.0)
    return out


@_twin_of(scores.balance)
def balance(nodes, cap, used, req, whole_k, gpu_mem_each, weights, coef, high, low, gen, cache, out):
    del gen, cache  # the twin recomputes everything
    c, u = cap[nodes], used[nodes]
    rq = _requests(nodes, req, whole_k, gpu_mem_each)
    on = (c > 0) & (weights > 0)
    w = np.where(on, weights, 0.0)
    inv = 1.0 / np.where(c > 0, c, 1.0)
    ub = np.where(on, u * inv, 0.0)
    ua = np.where(on, (u + rq) * inv, 0.0)
    rn = ua - ub
    fb = np.where(on, 1.0 - ub, 0.0)
    w_sum = w.sum(axis=1)
    dims = on.sum(axis=1)
    ws = np.where(w_sum > 0, w_sum, 1.0)
    req_sq = (w * rn * rn).sum(axis=1)
    free_sq = (w * fb * fb).sum(axis=1)
    dot = (w * rn * fb).sum(axis=1)
    align = np.where(req_sq == 0, 1.0, np.where(free_sq == 0, 0.0, dot / np.sqrt(np.maximum(req_sq * free_sq, 1e-300))))
    mean_b = (w * ub).sum(axis=1) / ws
    mean_a = (w * ua).sum(axis=1) / ws
    var_b = (w * (ub - mean_b[:, None]) ** 2).sum(axis=1) / ws
    var_a = (w * (ua - mean_a[:, None]) ** 2).sum(axis=1) / ws
    evenness = np.clip(0.5 + 2.0 * (var_b - var_a), 0.0, 1.0)
    max_after = np.where(on, ua, 0.0).max(axis=1)
    stranded = (on & (ua <= low) & (max_after >= high)[:, None]).sum(axis=1)
    unstranded = np.where(dims > 1, 1.0 - stranded / np.maximum(dims - 1, 1), 1.0)
    headroom = np.maximum(0.0, np.minimum(1.0, np.where(on, 1.0 - ua, np.inf).min(axis=1)))
    score = 100.0 * (coef[0] * align + coef[1] * evenness + coef[2] * unstranded + coef[3] * headroom) / coef.sum()
    out[:] = np.where(dims > 0, score, 0.0)
    return out


@_twin_of(scores.bestfit)
def bestfit(nodes, cap, used, req, max_cpu, max_gpu, out):
    cpu_left = cap[nodes, layout.CPU] - used[nodes, layout.CPU] - req[layout.CPU]
    gpu_left = cap[nodes, layout.GPU_MILLI] - used[nodes, layout.GPU_MILLI] - req[layout.GPU_MILLI]
    out[:] = np.trunc((1.0 - (0.5 * cpu_left / max_cpu + 0.5 * gpu_left / max_gpu)) * 100.0)
    return out


@_twin_of(scores.dotprod)
def dotprod(nodes, cap, used, req, max_cpu, max_gpu, out):
    cpu_free = (cap[nodes, layout.CPU] - used[nodes, layout.CPU]) / max_cpu
    gpu_free = (cap[nodes, layout.GPU_MILLI] - used[nodes, layout.GPU_MILLI]) / max_gpu
    dot = cpu_free * req[layout.CPU] / max_cpu + gpu_free * req[layout.GPU_MILLI] / max_gpu
    out[:] = np.trunc((1.0 - dot / 2.0) * 100.0)
    return out


def _unusable(cpu_free: F64, free: F64, slots: B, model: I64, typical: TypicalPods) -> F64:
    """Idle milli each typical pod could not use, per row: cpu_free (K,), free (K, G), slots (K, G) -> (K, T)."""
    free = np.where(slots, free, 0.0)
    idle = free.sum(axis=-1)
    tm = typical.milli[:, None]
    ge = (free[..., None, :] >= tm) & slots[..., None, :]
    count_ge = ge.sum(axis=-1)
    sum_lt = np.where(ge, 0.0, free[..., None, :]).sum(axis=-1)
    known = model >= 0
    allowed = np.zeros(model.shape + typical.cpu.shape, dtype=bool)
    allowed[known] = typical.model_ok[:, model[known]].T
    allowed |= typical.any_model
    fits = (typical.count > 0) & allowed & (count_ge >= typical.count) & (cpu_free[..., None] >= typical.cpu)
    result: F64 = np.where(fits, sum_lt, idle[..., None])
    return result


def _frag(cpu_free: F64, free: F64, slots: B, model: I64, typical: TypicalPods) -> F64:
    result: F64 = (_unusable(cpu_free, free, slots, model, typical) * typical.weight).sum(axis=-1)
    return result


def _drop(before: F64, after: F64, typical: TypicalPods) -> F64:
    """Fragmentation drop summed term by term (exactly 0 where nothing changes)."""
    result: F64 = ((before - after) * typical.weight).sum(axis=-1)
    return result


@_twin_of(fgd_kernel.fragmentation)
def fragmentation(cap, used, gpu_free, gpu_count, node_model, typical, out):
    slots = np.arange(gpu_free.shape[1]) < gpu_count[:, None]
    out[:] = _frag(cap[:, layout.CPU] - used[:, layout.CPU], gpu_free, slots, node_model, typical)
    return out


def _fgd_score(delta: F64, exact: bool, scale: float) -> F64:
    value: F64 = 100.0 / (1.0 + np.exp(-delta / scale))
    return value if exact else np.trunc(value)


@_twin_of(fgd_kernel.fgd)
def fgd(
    nodes,
    cap,
    used,
    gpu_free,
    gpu_mem_free,
    gpu_count,
    node_model,
    gen,
    typical,
    cache,
    cpu_req,
    k,
    m,
    gmem,
    out_score,
    out_delta,
    out_gpu,
    *,
    exact=False,
    scale=1000.0,
):
    del gen, cache  # the twin recomputes everything
    free = gpu_free[nodes]
    n_slots = free.shape[1]
    slots = np.arange(n_slots) < gpu_count[nodes][:, None]
    model = node_model[nodes]
    cpu_free = cap[nodes, layout.CPU] - used[nodes, layout.CPU]
    before = _unusable(cpu_free, free, slots, model, typical)
    if k == 0 or m >= layout.WHOLE:
        taken = free.copy()
        if k > 0:
            whole = (free >= layout.WHOLE) & slots
            rank = np.cumsum(whole, axis=1)
            taken = np.where(whole & (rank <= k), 0.0, free)
        delta = _drop(before, _unusable(cpu_free - cpu_req, taken, slots, model, typical), typical)
        out_delta[:] = delta
        out_score[:] = _fgd_score(delta, exact, scale)
        out_gpu[:] = -1
        return out_score
    # One candidate per device: (K, G candidates, G devices).
    cand = np.repeat(free[:, None, :], n_slots, axis=1)
    eye = np.eye(n_slots, dtype=bool)
    cand = np.where(eye[None], cand - m, cand)
    ok = slots & (free >= m)
    if gmem > 0:
        ok &= gpu_mem_free[nodes] >= gmem
    after = _unusable(
        (cpu_free - cpu_req)[:, None],
        cand,
        np.repeat(slots[:, None, :], n_slots, axis=1),
        np.repeat(model[:, None], n_slots, axis=1),
        typical,
    )
    delta = _drop(before[:, None, :], after, typical)
    score = np.where(ok, _fgd_score(delta, exact, scale), -1.0)
    best = np.where(ok, delta, -np.inf).argmax(axis=1) if exact else score.argmax(axis=1)
    rows = np.arange(nodes.shape[0])
    out_score[:] = score[rows, best]
    out_delta[:] = np.where(ok[rows, best], delta[rows, best], 0.0)
    out_gpu[:] = np.where(ok[rows, best], best, -1)
    return out_score


@_twin_of(scores.gpu_packing)
def gpu_packing(nodes, gpu_free, gpu_count, k, m, out):
    for i, n in enumerate(nodes):
        if k == 0 or m <= 0:
            out[i] = 0.0
            continue
        free = gpu_free[n, : gpu_count[n]]
        whole_free = int((free >= layout.WHOLE).sum())
        if whole_free == free.shape[0]:
            out[i] = max(33 - whole_free, whole_free)
            continue
        order = np.argsort(free, kind="stable")
        taken = [g for g in order if free[g] >= m][:k]
        taken_whole = sum(1 for g in taken if free[g] >= layout.WHOLE)
        if taken_whole:
            out[i] = max(50 - taken_whole, 33)
        else:
            out[i] = max(100 - sum(int(free[g]) * 100 // 1000 for g in taken) // 10, 50)
    return out


@_twin_of(scores.gpu_clustering)
def gpu_clustering(nodes, cap, used, classes, pod_class, max_gpu, out):
    if pod_class < 0:
        out[:] = 0.0
        return out
    free = (cap[nodes, layout.GPU_MILLI] - used[nodes, layout.GPU_MILLI]).astype(np.int64)
    base = 25 * (int(max_gpu) - free) // int(max_gpu)
    present = (classes[nodes] > 0).sum(axis=1)
    mine = classes[nodes, pod_class] > 0
    out[:] = base + np.where(mine, np.where(present == 1, 75, 50), np.where(present == 0, 25, 0))
    return out
