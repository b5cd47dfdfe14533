"""Typical pod shapes as the FGD kernel's arrays, shared by the fgd plugin and the simulator's metrics."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.api.basics import resources
from scheduler.framework import typical
from scheduler.kernels import fgd as fgd_kernel


def typical_arrays(shapes: Sequence[typical.Shape], models: Sequence[str]) -> fgd_kernel.TypicalPods:
    """``shapes`` with ``model_ok[t, id]`` for the cluster's GPU models (``models`` in id order)."""
    model_ok = np.array(
        [[any(resources.model_matches(a, m) for a in s.models) for m in models] or [False] for s in shapes],
        dtype=bool,
    ).reshape(len(shapes), max(1, len(models)))
    return fgd_kernel.TypicalPods(
        cpu=np.array([s.cpu for s in shapes], dtype=np.float64),
        milli=np.array([s.milli for s in shapes], dtype=np.float64),
        count=np.array([s.gpus for s in shapes], dtype=np.int64),
        any_model=np.array([not s.models for s in shapes], dtype=bool),
        model_ok=model_ok,
        weight=np.array([s.weight for s in shapes], dtype=np.float64),
    )
