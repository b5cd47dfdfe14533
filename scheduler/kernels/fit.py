"""Which nodes can hold a pod, and why the others cannot: one pass over every node.

``node_reason`` carries what was decided outside the kernel (slot empty, node cordoned, taint, selector);
the kernel adds resource, GPU-model, whole-GPU, shared-GPU and GPU-memory checks and writes the first reason
each node fails, or ``FIT``.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from scheduler.kernels import layout
from scheduler.kernels._jit import jit_pair, pick

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
B = npt.NDArray[np.bool_]


def _fit(cap, used, req, gpus, model_ok, any_model, k, m, gmem, node_reason, out):
    # ``gpus``: the nodes' device table, (free milli, free memory) per device, device count and GPU model.
    gpu_free, gpu_mem_free, gpu_count, node_model = gpus
    n_nodes, n_res = cap.shape
    for n in numba.prange(n_nodes):
        reason = node_reason[n]
        if reason == layout.FIT:
            for r in range(n_res):
                if r == layout.GPU_MILLI or r == layout.GPU_MEMORY:
                    continue
                if req[r] > 0.0 and used[n, r] + req[r] > cap[n, r]:
                    reason = layout.RESOURCE + r
                    break
        if reason == layout.FIT and k > 0:
            model = node_model[n]
            if gpu_count[n] < k:
                reason = layout.GPU_COUNT
            elif not any_model and (model < 0 or not model_ok[model]):
                reason = layout.GPU_MODEL
            elif m >= layout.WHOLE:
                free = 0
                for g in range(gpu_count[n]):
                    if gpu_free[n, g] >= layout.WHOLE:
                        free += 1
                if free < k:
                    reason = layout.GPU_COUNT
            else:
                share = False
                found = False
                for g in range(gpu_count[n]):
                    if gpu_free[n, g] >= m:
                        share = True
                        if gmem <= 0.0 or gpu_mem_free[n, g] >= gmem:
                            found = True
                            break
                if not found:
                    reason = layout.GPU_MEMORY_SHORT if share else layout.GPU_SHARE
        out[n] = reason


_FIT = jit_pair(_fit)


def fit(
    cap: F64,
    used: F64,
    req: F64,
    gpu_free: F64,
    gpu_mem_free: F64,
    gpu_count: I64,
    node_model: I64,
    model_ok: B,
    any_model: bool,
    k: int,
    m: float,
    gmem: float,
    node_reason: I8,
    out: I8,
    *,
    nodes: int | None = None,
) -> I8:
    """Write into ``out`` (int8, one per node) why each node cannot hold the pod, or ``layout.FIT``.

    ``req`` is the pod's request per column; ``k`` GPUs of ``m`` milli each (``m`` = 1000: whole GPUs, which need
    fully free devices; less: one shared device with ``m`` milli and ``gmem`` bytes free). ``model_ok[id]`` says
    which GPU models are allowed unless ``any_model``. ``nodes``: how many of the rows hold a node (the cache's
    arrays have room to grow, up to twice its nodes); it, not the row count, picks the parallel twin.
    """
    n_nodes, n_res = cap.shape
    if used.shape != cap.shape or req.shape != (n_res,) or out.shape != (n_nodes,):
        raise ValueError("fit: cap, used, req and out disagree in shape")
    if gpu_free.shape[0] != n_nodes or gpu_mem_free.shape != gpu_free.shape or node_reason.shape != (n_nodes,):
        raise ValueError("fit: GPU table or node_reason disagree with cap in shape")
    gpus = (gpu_free, gpu_mem_free, gpu_count, node_model)
    pick(_FIT, n_nodes if nodes is None else nodes)(
        cap, used, req, gpus, model_ok, any_model, k, float(m), float(gmem), node_reason, out
    )
    return out
