"""Node scores for one pod over many nodes at once: spread, binpack, per-resource strategy, scarce-resource
avoidance, cross-dimensional balance, and the FGD paper's BestFit and DotProd baselines.

Every kernel scores the nodes listed in ``nodes`` (indices into the cluster arrays) and writes one float per
listed node into ``out``, in 0..100 (higher is better). A request for column ``r`` on node ``n`` is
``req[r]``, plus, for the GPU-memory column, ``whole_k`` devices' worth of that node's device memory: a
whole-GPU pod takes all of its devices' memory, whatever their size. The formulas and their reasons are in
docs/scoring.md.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

from scheduler.kernels import layout
from scheduler.kernels._jit import jit, jit_pair, pick

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


@jit
def _request(req, r, n, whole_k, gpu_mem_each):
    if r == layout.GPU_MEMORY and whole_k > 0:
        return req[r] + whole_k * gpu_mem_each[n]
    return req[r]


def _check(nodes: I64, cap: F64, used: F64, req: F64, out: F64, per_resource: F64 | None = None) -> None:
    if used.shape != cap.shape or req.shape != (cap.shape[1],) or out.shape != nodes.shape:
        raise ValueError("score: cap, used, req, nodes and out disagree in shape")
    if per_resource is not None and per_resource.shape != req.shape:
        raise ValueError("score: one weight per resource column is needed")


# --- spread: kube-scheduler's LeastAllocated -----------------------------------------------------------------


def _spread(nodes, cap, used, req, whole_k, gpu_mem_each, weights, out):
    # Branch-free over columns: a column the node lacks gets weight 0 (a select, not a jump), because which
    # columns a node has varies from node to node and mispredicted branches cost more than the arithmetic.
    n_res = cap.shape[1]
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        total = 0.0
        weight_sum = 0.0
        for r in range(n_res):
            c = cap[n, r]
            on = c > 0.0
            w = weights[r] if on else 0.0
            c = c if on else 1.0
            total += w * (c - used[n, r] - _request(req, r, n, whole_k, gpu_mem_each)) / c
            weight_sum += w
        out[i] = 100.0 * total / weight_sum if weight_sum > 0.0 else 0.0


_SPREAD = jit_pair(_spread)


def spread(nodes: I64, cap: F64, used: F64, req: F64, whole_k: int, gpu_mem_each: F64, weights: F64, out: F64) -> F64:
    """Weighted mean free share after placement, over the resources the node has (LeastAllocated)."""
    _check(nodes, cap, used, req, out, weights)
    pick(_SPREAD, nodes.shape[0])(nodes, cap, used, req, whole_k, gpu_mem_each, weights, out)
    return out


# --- binpack: Volcano's binpack ------------------------------------------------------------------------------


def _binpack(nodes, cap, used, req, whole_k, gpu_mem_each, weights, out):
    n_res = cap.shape[1]
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        total = 0.0
        weight_sum = 0.0
        for r in range(n_res):
            c = cap[n, r]
            rq = _request(req, r, n, whole_k, gpu_mem_each)
            on = (c > 0.0) & (rq > 0.0)
            w = weights[r] if on else 0.0
            c = c if on else 1.0
            total += w * (used[n, r] + rq) / c
            weight_sum += w
        out[i] = 100.0 * total / weight_sum if weight_sum > 0.0 else 0.0


_BINPACK = jit_pair(_binpack)


def binpack(nodes: I64, cap: F64, used: F64, req: F64, whole_k: int, gpu_mem_each: F64, weights: F64, out: F64) -> F64:
    """Weighted mean used share after placement, over the resources the pod requests (Volcano binpack)."""
    _check(nodes, cap, used, req, out, weights)
    pick(_BINPACK, nodes.shape[0])(nodes, cap, used, req, whole_k, gpu_mem_each, weights, out)
    return out


# --- per-resource strategy: Koordinator's NodeResourcesFitPlus -----------------------------------------------


def _resource_strategy(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, out):
    n_res = cap.shape[1]
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        total = 0.0
        weight_sum = 0.0
        for r in range(n_res):
            c = cap[n, r]
            rq = _request(req, r, n, whole_k, gpu_mem_each)
            on = (c > 0.0) & (rq > 0.0)
            w = weights[r] if on else 0.0
            c = c if on else 1.0
            after = (used[n, r] + rq) / c
            total += w * (after if most[r] else 1.0 - after)
            weight_sum += w
        out[i] = 100.0 * total / weight_sum if weight_sum > 0.0 else 0.0


_RESOURCE_STRATEGY = jit_pair(_resource_strategy)


def resource_strategy(
    nodes: I64,
    cap: F64,
    used: F64,
    req: F64,
    whole_k: int,
    gpu_mem_each: F64,
    weights: F64,
    most: B,
    out: F64,
) -> F64:
    """Each requested resource scored Most (``most[r]``) or Least allocated, weighted per resource."""
    _check(nodes, cap, used, req, out, weights)
    pick(_RESOURCE_STRATEGY, nodes.shape[0])(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, out)
    return out


# --- scarce-resource avoidance: Koordinator's ScarceResourceAvoidance ----------------------------------------


def _scarce_avoidance(nodes, cap, req, scarce, out):
    n_res = cap.shape[1]
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        has = 0
        wasted = 0
        for r in range(n_res):
            on = cap[n, r] > 0.0
            has += on
            wasted += on & scarce[r] & (req[r] <= 0.0)
        out[i] = 100.0 * (has - wasted) / has if has > 0 else 100.0


_SCARCE_AVOIDANCE = jit_pair(_scarce_avoidance)


def scarce_avoidance(nodes: I64, cap: F64, req: F64, scarce: B, out: F64) -> F64:
    """Lower for nodes holding scarce resources (GPUs) the pod does not ask for."""
    if req.shape != (cap.shape[1],) or scarce.shape != req.shape or out.shape != nodes.shape:
        raise ValueError("scarce_avoidance: shapes disagree")
    pick(_SCARCE_AVOIDANCE, nodes.shape[0])(nodes, cap, req, scarce, out)
    return out


# --- balance: cross-dimensional, against stranded resources --------------------------------------------------


def _balance(nodes, cap, used, req, whole_k, gpu_mem_each, weights, coef, high, low, out):
    # One pass per node and one division per dimension (a reciprocal): weighted sums give the cosine, both
    # variances (E[x^2] - mean^2) and the stranding count.
    n_res = cap.shape[1]
    scale = 100.0 / (coef[0] + coef[1] + coef[2] + coef[3])
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        w_sum = 0.0
        dot = 0.0
        req_sq = 0.0
        free_sq = 0.0
        mean_b = 0.0
        mean_a = 0.0
        sq_b = 0.0
        sq_a = 0.0
        dims = 0
        lows = 0
        max_after = 0.0
        headroom = 1.0
        for r in range(n_res):
            c = cap[n, r]
            on = (c > 0.0) & (weights[r] != 0.0)
            w = weights[r] if on else 0.0
            inv = 1.0 / c if on else 0.0
            u = used[n, r]
            ub = u * inv
            ua = (u + _request(req, r, n, whole_k, gpu_mem_each)) * inv
            rn = ua - ub
            fb = 1.0 - ub
            wub = w * ub
            wua = w * ua
            dot += w * rn * fb
            req_sq += w * rn * rn
            free_sq += w * fb * fb
            mean_b += wub
            mean_a += wua
            sq_b += wub * ub
            sq_a += wua * ua
            w_sum += w
            dims += on
            # Branch-free: utilisations are unpredictable, and mispredicted branches cost more than the arithmetic.
            lows += on & (ua <= low)
            max_after = max(max_after, ua)
            headroom = min(headroom, 1.0 - ua if on else 1.0)
        if dims == 0:
            out[i] = 0.0
            continue
        inv_w = 1.0 / w_sum
        mean_b *= inv_w
        mean_a *= inv_w
        var_b = sq_b * inv_w - mean_b * mean_b
        var_a = sq_a * inv_w - mean_a * mean_a
        stranded = lows if max_after >= high else 0
        if req_sq == 0.0:
            align = 1.0
        elif free_sq == 0.0:
            align = 0.0
        else:
            align = dot / math.sqrt(req_sq * free_sq)
        evenness = min(1.0, max(0.0, 0.5 + 2.0 * (var_b - var_a)))
        unstranded = 1.0 - stranded / (dims - 1) if dims > 1 else 1.0
        headroom = max(0.0, headroom)
        out[i] = scale * (coef[0] * align + coef[1] * evenness + coef[2] * unstranded + coef[3] * headroom)


_BALANCE = jit_pair(_balance)


def balance(
    nodes: I64,
    cap: F64,
    used: F64,
    req: F64,
    whole_k: int,
    gpu_mem_each: F64,
    weights: F64,
    coef: F64,
    high: float,
    low: float,
    out: F64,
) -> F64:
    """Cross-dimensional balance: alignment, evenness gained, no stranded dimension, headroom (coef weights)."""
    _check(nodes, cap, used, req, out, weights)
    if coef.shape != (4,) or coef.sum() <= 0.0:
        raise ValueError("balance: coef needs four non-negative weights with a positive sum")
    pick(_BALANCE, nodes.shape[0])(
        nodes, cap, used, req, whole_k, gpu_mem_each, weights, coef, float(high), float(low), out
    )
    return out


# --- the FGD paper's baselines -------------------------------------------------------------------------------


def _bestfit(nodes, cap, used, req, max_cpu, max_gpu, out):
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        cpu_left = cap[n, layout.CPU] - used[n, layout.CPU] - req[layout.CPU]
        gpu_left = cap[n, layout.GPU_MILLI] - used[n, layout.GPU_MILLI] - req[layout.GPU_MILLI]
        out[i] = float(int((1.0 - (0.5 * cpu_left / max_cpu + 0.5 * gpu_left / max_gpu)) * 100.0))


_BESTFIT = jit_pair(_bestfit)


def bestfit(nodes: I64, cap: F64, used: F64, req: F64, max_cpu: float, max_gpu: float, out: F64) -> F64:
    """The FGD paper's BestFit: less CPU and GPU left over after placement is better (integer, unnormalised)."""
    _check(nodes, cap, used, req, out)
    pick(_BESTFIT, nodes.shape[0])(nodes, cap, used, req, float(max_cpu), float(max_gpu), out)
    return out


def _dotprod(nodes, cap, used, req, max_cpu, max_gpu, out):
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        cpu_free = (cap[n, layout.CPU] - used[n, layout.CPU]) / max_cpu
        gpu_free = (cap[n, layout.GPU_MILLI] - used[n, layout.GPU_MILLI]) / max_gpu
        dot = cpu_free * req[layout.CPU] / max_cpu + gpu_free * req[layout.GPU_MILLI] / max_gpu
        out[i] = float(int((1.0 - dot / 2.0) * 100.0))


_DOTPROD = jit_pair(_dotprod)


def dotprod(nodes: I64, cap: F64, used: F64, req: F64, max_cpu: float, max_gpu: float, out: F64) -> F64:
    """The FGD paper's DotProd ("merge" GPU dimension, max-normalised): a smaller dot product of the node's free
    vector with the request scores higher (integer)."""
    _check(nodes, cap, used, req, out)
    pick(_DOTPROD, nodes.shape[0])(nodes, cap, used, req, float(max_cpu), float(max_gpu), out)
    return out


@jit
def _gpu_packing(nodes, gpu_free, gpu_count, k, m, out):
    for i in range(nodes.shape[0]):
        n = nodes[i]
        if k == 0 or m <= 0.0:
            out[i] = 0.0
            continue
        devices = gpu_count[n]
        whole_free = 0
        for g in range(devices):
            if gpu_free[n, g] >= layout.WHOLE:
                whole_free += 1
        if whole_free == devices:
            out[i] = float(max(33 - whole_free, whole_free))
            continue
        # Take devices in increasing free milli (ties by index) that fit, until the pod has k of them.
        order = np.argsort(gpu_free[n, :devices], kind="mergesort")
        taken = 0
        taken_whole = 0
        free_sum = 0
        for j in range(devices):
            g = order[j]
            if gpu_free[n, g] >= m:
                taken += 1
                if gpu_free[n, g] >= layout.WHOLE:
                    taken_whole += 1
                free_sum += int(gpu_free[n, g]) * 100 // 1000
                if taken == k:
                    break
        if taken_whole > 0:
            out[i] = float(max(50 - taken_whole, 33))
        else:
            out[i] = float(max(100 - free_sum // 10, 50))


def gpu_packing(nodes: I64, gpu_free: F64, gpu_count: I64, k: int, m: float, out: F64) -> F64:
    """The FGD paper's GpuPacking: prefer partly used devices, then partly used nodes, then empty nodes (integer)."""
    if out.shape != nodes.shape or gpu_count.shape[0] != gpu_free.shape[0]:
        raise ValueError("gpu_packing: shapes disagree")
    _gpu_packing(nodes, gpu_free, gpu_count, int(k), float(m), out)
    return out


@jit
def _gpu_clustering(nodes, cap, used, classes, pod_class, max_gpu, out):
    n_classes = classes.shape[1]
    for i in range(nodes.shape[0]):
        n = nodes[i]
        if pod_class < 0:
            out[i] = 0.0
            continue
        free = int(cap[n, layout.GPU_MILLI] - used[n, layout.GPU_MILLI])
        base = 25 * (int(max_gpu) - free) // int(max_gpu)
        present = 0
        for c in range(n_classes):
            if classes[n, c] > 0:
                present += 1
        if classes[n, pod_class] > 0:
            base += 75 if present == 1 else 50
        elif present == 0:
            base += 25
        out[i] = float(base)


def gpu_clustering(nodes: I64, cap: F64, used: F64, classes: I64, pod_class: int, max_gpu: float, out: F64) -> F64:
    """The FGD paper's GpuClustering: prefer nodes whose GPU pods are all of the pod's class (shared, 1-GPU,
    2-GPU, ...). ``classes[n, c]`` counts the GPU pods of class c on node n; ``pod_class`` < 0 for CPU pods."""
    if out.shape != nodes.shape or classes.shape[0] != cap.shape[0]:
        raise ValueError("gpu_clustering: shapes disagree")
    _gpu_clustering(nodes, cap, used, classes, int(pod_class), float(max_gpu), out)
    return out
