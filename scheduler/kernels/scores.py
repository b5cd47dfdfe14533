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
from scheduler.kernels._jit import jit, jit_inline, jit_pair, pick

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


# --- least and most allocated: spread, binpack, per-resource strategy ----------------------------------------


#: Which share of each column the allocation scores count: free (spread), used (binpack), or as ``most[r]`` says.
_LEAST, _MOST, _EACH = 0, 1, 2


@jit_inline
def _allocated_at(n, cap, used, req, whole_k, gpu_mem_each, weights, mode, most):
    # Node n's score: per column, the share after placement that is used or free (``mode``), weighted over the
    # columns the node has, or under _MOST and _EACH over those the pod requests. Branch-free over columns: a column
    # that does not count gets weight 0 (a select, not a jump), because which columns count varies from node to
    # node and mispredicted branches cost more than the arithmetic. Each kernel below passes its ``mode`` as a
    # constant, so the compiler drops the choices that do not apply to it.
    total = 0.0
    weight_sum = 0.0
    for r in range(cap.shape[1]):
        c = cap[n, r]
        u = used[n, r]
        rq = _request(req, r, n, whole_k, gpu_mem_each)
        on = (c > 0.0) & ((mode == _LEAST) | (rq > 0.0))
        w = weights[r] if on else 0.0
        c = c if on else 1.0
        if mode == _EACH:
            after = (u + rq) / c
            total += w * (after if most[r] else 1.0 - after)
        else:
            # Written as spread and binpack always were, so that their scores stay the same to the last bit.
            total += w * ((u + rq) if mode == _MOST else (c - u - rq)) / c
        weight_sum += w
    return 100.0 * total / weight_sum if weight_sum > 0.0 else 0.0


def _spread(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, out):
    for i in numba.prange(nodes.shape[0]):
        out[i] = _allocated_at(nodes[i], cap, used, req, whole_k, gpu_mem_each, weights, _LEAST, most)


def _binpack(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, out):
    for i in numba.prange(nodes.shape[0]):
        out[i] = _allocated_at(nodes[i], cap, used, req, whole_k, gpu_mem_each, weights, _MOST, most)


def _resource_strategy(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, out):
    for i in numba.prange(nodes.shape[0]):
        out[i] = _allocated_at(nodes[i], cap, used, req, whole_k, gpu_mem_each, weights, _EACH, most)


_ALLOCATED = {_LEAST: jit_pair(_spread), _MOST: jit_pair(_binpack), _EACH: jit_pair(_resource_strategy)}


def _allocated_score(nodes, cap, used, req, whole_k, gpu_mem_each, weights, mode, most, out):
    # Private, as the kernels: its callers, the public wrappers below, carry the types.
    _check(nodes, cap, used, req, out, weights)
    pick(_ALLOCATED[mode], nodes.shape[0])(nodes, cap, used, req, whole_k, gpu_mem_each, weights, most, out)


def spread(nodes: I64, cap: F64, used: F64, req: F64, whole_k: int, gpu_mem_each: F64, weights: F64, out: F64) -> F64:
    """Weighted mean free share after placement, over the resources the node has (kube-scheduler's
    LeastAllocated)."""
    _allocated_score(nodes, cap, used, req, whole_k, gpu_mem_each, weights, _LEAST, _NO_FLAGS, out)
    return out


def binpack(nodes: I64, cap: F64, used: F64, req: F64, whole_k: int, gpu_mem_each: F64, weights: F64, out: F64) -> F64:
    """Weighted mean used share after placement, over the resources the pod requests (Volcano's binpack)."""
    _allocated_score(nodes, cap, used, req, whole_k, gpu_mem_each, weights, _MOST, _NO_FLAGS, out)
    return out


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
    """Each requested resource scored Most (``most[r]``) or Least allocated, weighted per resource (Koordinator's
    NodeResourcesFitPlus)."""
    if most.shape != req.shape:
        raise ValueError("resource_strategy: one Most/Least flag per resource column is needed")
    _allocated_score(nodes, cap, used, req, whole_k, gpu_mem_each, weights, _EACH, most, out)
    return out


#: The flags spread and binpack pass (their mode says the share of every column).
_NO_FLAGS = np.zeros(0, dtype=np.bool_)


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

# Per node, what balance needs that does not depend on the pod, kept in BalanceCache.stats by these columns.
_INV_W = 0  # 1 / (sum of the weights of the node's dimensions), 0 for a node without any
_MEAN_B = 1  # weighted mean utilisation before placement
_FREE_SQ = 2  # sum of w * (1 - u_b)^2: the free vector's squared norm
_DIMS = 3  # dimensions that count on this node (capacity and a positive weight)
_STATS = 4

#: Nodes scored together: the per-pod pass goes resource by resource over a chunk of nodes, so that the
#: arithmetic runs across nodes in SIMD lanes (a node has too few dimensions to fill them), on copies of the
#: chunk's rows made column by column (its nodes are anywhere in the cluster arrays). 256 measured fastest of
#: 64..1024 on the project's machine (512 the same, 64 and 128 7% slower, 1024 nearly three times slower).
_CHUNK = 256


@jit
def _balance_refresh(size, weights, u_blk, inv_blk, st, stale):
    # The pod-independent quantities of a chunk's stale nodes (``stale[j]``), whose capacities ``inv_blk`` holds
    # in place of the reciprocals; every lane is computed, so that the loops vectorise, and the stale ones kept.
    # The reciprocal is the NumPy twin's 1/c, so utilisations (and the thresholds compared with them) agree bit
    # for bit.
    sums = np.zeros((4, _CHUNK))  # one allocation for the four sums
    w_sum = sums[0]
    mean_b = sums[1]
    free_sq = sums[2]
    dims = sums[3]
    for r in range(inv_blk.shape[0]):
        w = weights[r]
        for j in range(size):
            c = inv_blk[r, j]
            on = (c > 0.0) & (w > 0.0)
            iv = 1.0 / c if on else 0.0
            iv = iv if stale[j] else c
            inv_blk[r, j] = iv
            ub = u_blk[r, j] * iv
            fb = 1.0 - ub
            wr = w if iv != 0.0 else 0.0
            w_sum[j] += wr
            mean_b[j] += wr * ub
            free_sq[j] += wr * fb * fb
            dims[j] += 1.0 if iv != 0.0 else 0.0
    for j in range(size):
        # Selects, not a branch per node: the loop vectorises (the divisions with it).
        some = dims[j] > 0.0
        fresh = stale[j]
        inv_w = 1.0 / w_sum[j] if some else 0.0
        mean = mean_b[j] / w_sum[j] if some else 0.0
        st[_INV_W, j] = inv_w if fresh else st[_INV_W, j]
        st[_MEAN_B, j] = mean if fresh else st[_MEAN_B, j]
        st[_FREE_SQ, j] = free_sq[j] if fresh else st[_FREE_SQ, j]
        st[_DIMS, j] = dims[j] if fresh else st[_DIMS, j]


def _balance(
    nodes, cap, used, req, whole_k, gpu_mem_each, weights, coef, high, low, gen, seen, seen_weights, inv, stats, out
):
    # The request enters only through r_n = u_a - u_b per dimension, so with the node's "before" terms cached
    # the pass needs three sums of it (sum w r_n, sum w r_n (1 - u_b), sum w r_n^2) and three running extremes of
    # u_a. The variance gained follows from u_a = u_b + r_n:
    #   var_b - var_a = m (2 mean_b + m) - (2 sum w r_n u_b + sum w r_n^2) / W,  m = sum w r_n / W.
    # A dimension that does not count has a reciprocal of 0, so u_a = r_n = 0 there: it adds nothing to the
    # sums, the maximum or the minimum, and counts as low exactly when 0 <= low (taken off below).
    n_res = cap.shape[1]
    # Checked here rather than in the wrapper: a NumPy comparison costs microseconds, ~1 ns per node of a call.
    for r in range(n_res):
        if seen_weights[r] != weights[r]:
            seen[:] = -1
            seen_weights[:] = weights
            break
    scale = 100.0 / (coef[0] + coef[1] + coef[2] + coef[3])
    k_align, k_even, k_unstr, k_head = scale * coef[0], scale * coef[1], scale * coef[2], scale * coef[3]
    off_low = 1.0 if low >= 0.0 else 0.0
    whole = float(whole_k) if whole_k > 0 else 0.0
    listed = nodes.shape[0]
    for chunk in numba.prange((listed + _CHUNK - 1) // _CHUNK):
        first = chunk * _CHUNK
        size = min(listed, first + _CHUNK) - first
        u_blk = np.empty((n_res, _CHUNK))
        inv_blk = np.empty((n_res, _CHUNK))
        st = np.empty((_STATS, _CHUNK))
        # The per-node columns of the pass in one allocation rather than seven (an allocation costs as much as
        # a few nodes' arithmetic).
        columns = np.zeros((7, _CHUNK))
        device_memory = columns[0]
        stale = np.zeros(_CHUNK, dtype=np.bool_)
        n_stale = 0
        # Gather the chunk's rows into columns; a node that changed since it was cached brings its capacities
        # instead of what was cached of it (not read: a cold pass would read as much again for nothing).
        for j in range(size):
            n = nodes[first + j]
            for r in range(n_res):
                u_blk[r, j] = used[n, r]
            if seen[n] != gen[n]:
                stale[j] = True
                n_stale += 1
                for r in range(n_res):
                    inv_blk[r, j] = cap[n, r]
            else:
                for r in range(n_res):
                    inv_blk[r, j] = inv[n, r]
                for s in range(_STATS):
                    st[s, j] = stats[n, s]
        if n_stale > 0:
            _balance_refresh(size, weights, u_blk, inv_blk, st, stale)
            for j in range(size):
                if stale[j]:
                    n = nodes[first + j]
                    for r in range(n_res):
                        inv[n, r] = inv_blk[r, j]
                    for s in range(_STATS):
                        stats[n, s] = st[s, j]
                    seen[n] = gen[n]
        if whole > 0.0:  # a whole-GPU pod takes all of its devices' memory
            for j in range(size):
                device_memory[j] = whole * gpu_mem_each[nodes[first + j]]
        s_q = columns[1]
        dot = columns[2]
        s_qq = columns[3]
        lows = columns[4]
        max_after = columns[5]
        headroom = columns[6]
        headroom[:] = 1.0
        for r in range(n_res):
            w = weights[r]
            rq = req[r]
            on_device = 1.0 if r == layout.GPU_MEMORY else 0.0
            for j in range(size):
                iv = inv_blk[r, j]
                u = u_blk[r, j]
                ub = u * iv
                ua = (u + (rq + on_device * device_memory[j])) * iv
                rn = ua - ub
                wrn = w * rn
                s_q[j] += wrn
                dot[j] += wrn * (1.0 - ub)
                s_qq[j] += wrn * rn
                # Selects, not branches: utilisations are unpredictable, and this way the loop vectorises.
                lows[j] += 1.0 if ua <= low else 0.0
                max_after[j] = max(max_after[j], ua)
                headroom[j] = min(headroom[j], 1.0 - ua)
        for j in range(size):
            inv_w = st[_INV_W, j]
            free_sq = st[_FREE_SQ, j]
            dims = st[_DIMS, j]
            m = s_q[j] * inv_w
            gained = m * (2.0 * st[_MEAN_B, j] + m) - (2.0 * (s_q[j] - dot[j]) + s_qq[j]) * inv_w
            if s_qq[j] == 0.0:
                align = 1.0
            elif free_sq == 0.0:
                align = 0.0
            else:
                align = dot[j] / math.sqrt(s_qq[j] * free_sq)
            evenness = min(1.0, max(0.0, 0.5 + 2.0 * gained))
            stranded = lows[j] - (n_res - dims) * off_low if max_after[j] >= high else 0.0
            unstranded = 1.0 - stranded / (dims - 1.0) if dims > 1.0 else 1.0
            score = k_align * align + k_even * evenness + k_unstr * unstranded + k_head * max(0.0, headroom[j])
            out[first + j] = score if dims > 0.0 else 0.0


_BALANCE = jit_pair(_balance)


class BalanceCache:
    """Per-node quantities of the balance score that do not depend on the pod, kept between calls (owned by the
    caller, one per cluster view, as :class:`scheduler.kernels.fgd.FragCache`): refreshed for the nodes whose
    generation number changed since (``seen[n] != gen[n]``), and for all when the weights change."""

    __slots__ = ("inv", "seen", "stats", "weights")

    def __init__(self, nodes: int, resources: int) -> None:
        self.seen = np.full(nodes, -1, dtype=np.int64)
        #: Per node and resource column, 1 / capacity where the dimension counts, else 0.
        self.inv = np.zeros((nodes, resources))
        #: Per node, the ``_STATS`` quantities named at the top of this section.
        self.stats = np.zeros((nodes, _STATS))
        #: The weights the cached quantities were computed with.
        self.weights = np.full(resources, np.nan)


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
    gen: I64,
    cache: BalanceCache,
    out: F64,
) -> F64:
    """Cross-dimensional balance: alignment, evenness gained, no stranded dimension, headroom (coef weights).

    ``gen`` is the cluster's per-node generation number, ``cache`` what was computed for each node at the number
    it had then (see :class:`BalanceCache`)."""
    _check(nodes, cap, used, req, out, weights)
    if coef.shape != (4,) or coef.sum() <= 0.0:
        raise ValueError("balance: coef needs four non-negative weights with a positive sum")
    if gen.shape != (cap.shape[0],):
        raise ValueError("balance: gen needs one generation number per node")
    if cache.seen.shape[0] < cap.shape[0] or cache.inv.shape[1] != cap.shape[1]:
        raise ValueError("balance: the BalanceCache was made for another cluster size or resource columns")
    pick(_BALANCE, nodes.shape[0])(
        nodes,
        cap,
        used,
        req,
        whole_k,
        gpu_mem_each,
        weights,
        coef,
        float(high),
        float(low),
        gen,
        cache.seen,
        cache.weights,
        cache.inv,
        cache.stats,
        out,
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
