"""The column layout of the cluster arrays that every kernel reads.

``cap`` and ``used`` are float64 arrays of shape (nodes, resources). The first five columns are fixed; extended
resources (``rdma/hca``, ``example.com/foo``) take the columns after them, in the order they were first seen.
GPU compute and GPU memory columns are node totals kept in step with the per-device table
(``gpu_free`` milli and ``gpu_mem_free`` bytes, shape (nodes, max GPUs per node)), so a kernel can score a node
by its totals and fit a pod by its devices.
"""

from __future__ import annotations

CPU = 0  # milli-cores
MEMORY = 1  # bytes
PODS = 2  # count
GPU_MILLI = 3  # milli-GPUs, 1000 per device
GPU_MEMORY = 4  # bytes of device memory
FIXED = 5

#: Milli of one whole GPU.
WHOLE = 1000.0

# Why a node does not fit (the first reason found), as the kernels and the cache write it. These are the numbers
# only: what each means (its text, whether an eviction helps...) is declared with the filter that owns it
# (``scheduler.framework.reasons``), and the other filters' codes are in their own modules. A filter picks its
# codes among 1..RESOURCE-1 and -128..-1 that nobody declares yet.
FIT = 0
#: An empty slot (no node there).
ABSENT = 1
#: A cordoned node (``spec.unschedulable``).
UNSCHEDULABLE = 2
#: The fit kernel's GPU refusals (the fit plugin declares them): a GPU model the pod does not allow, too few free
#: whole GPUs, no GPU with the free share, no GPU with the free memory.
GPU_MODEL = 5
GPU_COUNT = 6
GPU_SHARE = 7
GPU_MEMORY_SHORT = 8
#: "Insufficient <resource>": RESOURCE + the resource's column (the fit kernel).
RESOURCE = 16
