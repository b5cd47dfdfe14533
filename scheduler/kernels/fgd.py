"""Fragmentation Gradient Descent (Weng et al., USENIX ATC 2023): score a node by how much placing the pod
there lowers the node's expected GPU fragmentation over a set of typical pods.

A node's fragmentation F is the sum over typical pods t, weighted by t's frequency, of the idle GPU-milli that
t could not use: all of it when t needs no GPU, may not use the node's GPU model, or does not fit (too little
CPU, or fewer than t's GPU count with t's milli free); otherwise only the idle milli of devices with less free
than t needs. The score is ``int(100 * sigmoid((F_before - F_after) / 1000))``; for a shared pod every device
that fits is tried and the best becomes both the node's score and the device it gets (ties: lowest index).

Per node and typical pod the kernel keeps two statistics: how many devices have at least t's milli free, and
how much idle milli sits on devices with less. With them, F after a candidate placement is O(typical pods), not
O(typical pods x devices). They are cached across calls in arrays the caller owns and refreshed for the nodes
whose generation number changed since (``seen[n] != gen[n]``), so scoring a stream of pods recomputes only
the nodes that the previous placements touched.
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


# The kernels take the typical pods and the cached statistics as two tuples of arrays, in the order of
# ``TypicalPods.arrays()`` and ``FragCache.arrays()``, and unpack what they use.


@jit
def _unusable(t, count_ge, sum_lt, idle, cpu_free, model, typical):
    t_cpu, _, t_k, t_any, t_model_ok, _ = typical
    if t_k[t] == 0:
        return idle
    if not t_any[t] and (model < 0 or not t_model_ok[t, model]):
        return idle
    if count_ge < t_k[t] or cpu_free < t_cpu[t]:
        return idle
    return sum_lt


@jit
def _refresh(n, cap, used, gpu_free, gpu_count, node_model, typical, stats):
    t_cpu, t_milli, t_k, t_any, t_model_ok, t_weight = typical
    count_ge, sum_lt, idle, frag, usable, n_usable, w_idle, unusable = stats
    devices = gpu_count[n]
    total = 0.0
    for g in range(devices):
        total += gpu_free[n, g]
    idle[n] = total
    cpu_free = cap[n, layout.CPU] - used[n, layout.CPU]
    model = node_model[n]
    f = 0.0
    w_all_idle = 0.0
    listed = 0
    for t in range(t_cpu.shape[0]):
        if t_k[t] == 0 or (not t_any[t] and (model < 0 or not t_model_ok[t, model])):
            # This typical pod can never use the node's GPUs: all idle milli is fragment for it.
            w_all_idle += t_weight[t]
            continue
        usable[n, listed] = t
        listed += 1
        c = 0
        s = 0.0
        for g in range(devices):
            a = gpu_free[n, g]
            if a >= t_milli[t]:
                c += 1
            else:
                s += a
        count_ge[n, t] = c
        sum_lt[n, t] = s
        u = _unusable(t, c, s, total, cpu_free, model, typical)
        unusable[n, t] = u
        f += t_weight[t] * u
    n_usable[n] = listed
    w_idle[n] = w_all_idle
    frag[n] = f + w_all_idle * total


@jit
def _drop(n, typical, stats, idle_after, cpu_after, old, new, times):
    # How much fragmentation drops once ``times`` devices went from ``old`` to ``new`` free milli. Summed term by
    # term, so that a placement that changes nothing gives exactly 0 (score 50), whatever the rounding.
    t_cpu, t_milli, t_k, _, _, t_weight = typical
    count_ge, sum_lt, idle, _, usable, n_usable, w_idle, unusable = stats
    f = w_idle[n] * (idle[n] - idle_after)
    for i in range(n_usable[n]):
        t = usable[n, i]
        tm = t_milli[t]
        c = count_ge[n, t]
        s = sum_lt[n, t]
        if old >= tm:
            c -= times
        else:
            s -= times * old
        if new >= tm:
            c += times
        else:
            s += times * new
        u = idle_after if (c < t_k[t] or cpu_after < t_cpu[t]) else s
        f += t_weight[t] * (unusable[n, t] - u)
    return f


@jit
def _score(delta, exact, scale):
    value = 100.0 / (1.0 + math.exp(-delta / scale))
    return value if exact else float(int(value))


def _fgd(
    nodes, cap, used, gpus, gen, typical, seen, stats, cpu_req, k, m, gmem, exact, scale, out_score, out_delta, out_gpu
):
    # ``gpus``: the nodes' device table, (free milli, free memory) per device, device count and GPU model.
    gpu_free, gpu_mem_free, gpu_count, node_model = gpus
    idle = stats[2]
    for i in numba.prange(nodes.shape[0]):
        n = nodes[i]
        if seen[n] != gen[n]:
            _refresh(n, cap, used, gpu_free, gpu_count, node_model, typical, stats)
            seen[n] = gen[n]
        cpu_after = cap[n, layout.CPU] - used[n, layout.CPU] - cpu_req
        best_gpu = -1
        if k == 0 or m >= layout.WHOLE:
            best_delta = _drop(n, typical, stats, idle[n] - k * layout.WHOLE, cpu_after, layout.WHOLE, 0.0, k)
            best_score = _score(best_delta, exact, scale)
        else:
            best_delta = 0.0
            best_score = -1.0
            for g in range(gpu_count[n]):
                a = gpu_free[n, g]
                if a < m or (gmem > 0.0 and gpu_mem_free[n, g] < gmem):
                    continue
                repeat = False
                for j in range(g):
                    if gpu_free[n, j] == a and (gmem <= 0.0 or gpu_mem_free[n, j] >= gmem):
                        repeat = True
                        break
                if repeat:
                    continue
                delta = _drop(n, typical, stats, idle[n] - m, cpu_after, a, a - m, 1)
                score = _score(delta, exact, scale)
                if score > best_score or (exact and score == best_score and delta > best_delta):
                    best_score = score
                    best_delta = delta
                    best_gpu = g
        out_score[i] = best_score
        out_delta[i] = best_delta
        out_gpu[i] = best_gpu


_FGD = jit_pair(_fgd)


class TypicalPods:
    """The typical pods FGD measures fragmentation against, as arrays (one entry per pod shape).

    ``model_ok[t, model_id]`` tells which GPU models shape t may use unless ``any_model[t]``.
    """

    __slots__ = ("any_model", "count", "cpu", "milli", "model_ok", "weight")

    def __init__(self, cpu: F64, milli: F64, count: I64, any_model: B, model_ok: B, weight: F64) -> None:
        t = cpu.shape[0]
        if milli.shape != (t,) or count.shape != (t,) or any_model.shape != (t,) or weight.shape != (t,):
            raise ValueError("TypicalPods: one entry per typical pod is needed in every array")
        if model_ok.ndim != 2 or model_ok.shape[0] != t:
            raise ValueError("TypicalPods: model_ok must be (typical pods, models)")
        self.cpu, self.milli, self.count = cpu, milli, count
        self.any_model, self.model_ok, self.weight = any_model, model_ok, weight

    def arrays(self) -> tuple[F64, F64, I64, B, B, F64]:
        """The arrays in the order the kernels unpack them."""
        return self.cpu, self.milli, self.count, self.any_model, self.model_ok, self.weight


class FragCache:
    """Per-node statistics the FGD kernel keeps between calls (owned by the caller, one per cluster view)."""

    __slots__ = ("count_ge", "frag", "idle", "n_usable", "seen", "sum_lt", "unusable", "usable", "w_idle")

    def __init__(self, nodes: int, typical: int) -> None:
        self.seen = np.full(nodes, -1, dtype=np.int64)
        self.count_ge = np.zeros((nodes, typical), dtype=np.int64)
        self.sum_lt = np.zeros((nodes, typical), dtype=np.float64)
        self.idle = np.zeros(nodes, dtype=np.float64)
        self.frag = np.zeros(nodes, dtype=np.float64)
        #: Per node, the typical pods that may use its GPUs (first ``n_usable`` entries), and the summed weight
        #: of the others, for which every idle milli is a fragment.
        self.usable = np.zeros((nodes, typical), dtype=np.int64)
        self.n_usable = np.zeros(nodes, dtype=np.int64)
        self.w_idle = np.zeros(nodes, dtype=np.float64)
        #: Per node and typical pod, the idle milli that pod could not use.
        self.unusable = np.zeros((nodes, typical), dtype=np.float64)

    def arrays(self) -> tuple[I64, F64, F64, F64, I64, I64, F64, F64]:
        """The per-node statistics (all but ``seen``) in the order the kernels unpack them."""
        return self.count_ge, self.sum_lt, self.idle, self.frag, self.usable, self.n_usable, self.w_idle, self.unusable


def fgd(
    nodes: I64,
    cap: F64,
    used: F64,
    gpu_free: F64,
    gpu_mem_free: F64,
    gpu_count: I64,
    node_model: I64,
    gen: I64,
    typical: TypicalPods,
    cache: FragCache,
    cpu_req: float,
    k: int,
    m: float,
    gmem: float,
    out_score: F64,
    out_delta: F64,
    out_gpu: I64,
    *,
    exact: bool = False,
    scale: float = 1000.0,
) -> F64:
    """Score the listed nodes for a pod of ``cpu_req`` milli-CPU and ``k`` GPUs of ``m`` milli.

    Writes the score ``100 * sigmoid(drop / scale)`` (0..100; truncated to an integer as in the paper unless
    ``exact``), the drop in fragmentation (GPU-milli, larger is better) and, for a shared
    pod, the device to use (-1 otherwise) for each listed node. Nodes must already fit the pod.
    """
    n_nodes = cap.shape[0]
    if cache.seen.shape[0] < n_nodes or cache.count_ge.shape[1] != typical.cpu.shape[0]:
        raise ValueError("fgd: the FragCache was made for another cluster size or typical-pod set")
    if out_score.shape != nodes.shape or out_delta.shape != nodes.shape or out_gpu.shape != nodes.shape:
        raise ValueError("fgd: outputs need one entry per listed node")
    pick(_FGD, nodes.shape[0])(
        nodes,
        cap,
        used,
        (gpu_free, gpu_mem_free, gpu_count, node_model),
        gen,
        typical.arrays(),
        cache.seen,
        cache.arrays(),
        float(cpu_req),
        int(k),
        float(m),
        float(gmem),
        bool(exact),
        float(scale),
        out_score,
        out_delta,
        out_gpu,
    )
    return out_score


def fragmentation(
    cap: F64, used: F64, gpu_free: F64, gpu_count: I64, node_model: I64, typical: TypicalPods, out: F64
) -> F64:
    """Each node's expected fragmentation in GPU-milli (the FGD paper's measure), into ``out``.

    Computed by the same per-node refresh the scoring kernel uses, into a scratch cache.
    """
    n_nodes = cap.shape[0]
    if out.shape != (n_nodes,):
        raise ValueError("fragmentation: one output per node is needed")
    scratch = FragCache(n_nodes, typical.cpu.shape[0])
    scratch.frag = out
    _refresh_all(cap, used, gpu_free, gpu_count, node_model, typical.arrays(), scratch.arrays())
    return out


@jit
def _refresh_all(cap, used, gpu_free, gpu_count, node_model, typical, stats):
    for n in range(cap.shape[0]):
        _refresh(n, cap, used, gpu_free, gpu_count, node_model, typical, stats)
