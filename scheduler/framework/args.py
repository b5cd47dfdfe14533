"""Helpers plugins share for reading their arguments (plugins do not import each other)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject

F64 = npt.NDArray[np.float64]

#: Names users write for the GPU columns.
ALIASES = {resources.GPU: resources.GPU_MILLI, "gpu": resources.GPU_MILLI, "gpu-memory": resources.GPU_MEMORY}


def check_keys(plugin: str, args: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in args:
        if key not in allowed:
            raise InvalidObject(
                f"unknown argument (expected one of {sorted(allowed)})",
                obj=f"plugin {plugin}",
                field=f"args.{key}",
            )


def number(
    plugin: str,
    args: Mapping[str, Any],
    key: str,
    default: float,
    *,
    low: float = 0.0,
    high: float = float("inf"),
) -> float:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidObject(
            f"{value!r} is not a number in [{low}, {high}]", obj=f"plugin {plugin}", field=f"args.{key}"
        )
    return float(value)


def choice(plugin: str, args: Mapping[str, Any], key: str, options: Sequence[str], default: str) -> str:
    value = args.get(key, default)
    if value not in options:
        raise InvalidObject(f"{value!r} is not one of {list(options)}", obj=f"plugin {plugin}", field=f"args.{key}")
    return str(value)


def resource_map(plugin: str, args: Mapping[str, Any], key: str, default: Mapping[str, Any]) -> dict[str, Any]:
    """A map from resource names to values, with ``nvidia.com/gpu`` meaning the GPU compute column."""
    raw = args.get(key, default)
    if not isinstance(raw, Mapping):
        raise InvalidObject("must be a map of resource names", obj=f"plugin {plugin}", field=f"args.{key}")
    return {ALIASES.get(str(name), str(name)): value for name, value in raw.items()}


class ColumnWeights:
    """Per-resource weights as a vector over the cache's columns, rebuilt only when columns are added."""

    def __init__(self, plugin: str, weights: Mapping[str, Any]) -> None:
        for name, w in weights.items():
            if isinstance(w, bool) or not isinstance(w, int | float) or w < 0:
                raise InvalidObject(
                    f"{w!r} is not a non-negative number",
                    obj=f"plugin {plugin}",
                    field=f"args.weights.{name}",
                )
        self._weights = {name: float(w) for name, w in weights.items()}
        self._vector: F64 = np.zeros(0)

    def vector(self, columns: Sequence[str]) -> F64:
        if self._vector.shape[0] != len(columns):
            self._vector = np.array([self._weights.get(c, 0.0) for c in columns], dtype=np.float64)
        return self._vector
