"""Placement quality at the end of a run: fully free GPU nodes and nodes with a stranded dimension."""

from __future__ import annotations

import numpy as np

from scheduler.cache.state import Cache
from scheduler.kernels import layout

#: A node is stranded when one of CPU, memory, GPU is above HIGH used while another is below LOW.
HIGH = 0.9
LOW = 0.2


def fully_free_gpu_nodes(cache: Cache) -> int:
    a = cache.arrays
    gpu_nodes = a.gpu_count > 0
    return int((gpu_nodes & (a.used[:, layout.GPU_MILLI] <= 0.0)).sum())


def stranded_nodes(cache: Cache) -> int:
    a = cache.arrays
    columns = [layout.CPU, layout.MEMORY, layout.GPU_MILLI]
    cap = a.cap[:, columns]
    present = cap > 0
    share = np.where(present, a.used[:, columns] / np.where(present, cap, 1.0), np.nan)
    high = np.nanmax(np.where(present, share, -np.inf), axis=1) > HIGH
    low = np.nanmin(np.where(present, share, np.inf), axis=1) < LOW
    return int((high & low & (present.sum(axis=1) >= 2)).sum())
