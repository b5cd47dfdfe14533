"""The numba settings for every kernel, in one place.

``cache=True`` keeps compiled machine code on disk (``NUMBA_CACHE_DIR`` moves it, e.g. to an emptyDir in a
read-only container); ``nogil`` lets the operator score on a thread; ``fastmath`` stays off so that kernels
agree with their NumPy references to 1e-9 and results do not depend on the CPU's vector width.
Set ``NUMBA_DISABLE_JIT=1`` to run the kernels as plain Python (coverage, debugging).

Kernels over many nodes also get a parallel twin (``prange`` over nodes, one thread per core); the public
wrappers use it from :data:`PARALLEL_MIN_NODES` nodes up.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])

_FLAGS: dict[str, Any] = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}

#: Node count from which a kernel runs on every core (``GPUSCHED_PARALLEL_MIN_NODES`` overrides). High on
#: purpose: a parallel call waits for its slowest thread, and on a busy machine (the operator's event loop, other
#: processes) a thread that lost its core costs a whole time slice, far more than a serial pass over a few
#: thousand nodes.
PARALLEL_MIN_NODES = int(os.environ.get("GPUSCHED_PARALLEL_MIN_NODES", "8192"))


def jit(func: F) -> F:
    """Compile ``func`` in nopython mode with the project's flags."""
    return cast(F, numba.njit(**_FLAGS)(func))


def jit_inline(func: F) -> F:
    """As :func:`jit`, and inlined into every kernel that calls it, before numba compiles that kernel: a constant
    the kernel passes it is folded (a helper shared by kernels that differ by a constant costs none of them)."""
    return cast(F, numba.njit(inline="always", **_FLAGS)(func))


def jit_pair(func: F) -> tuple[F, F]:
    """Compile ``func`` twice: serial, and parallel over its ``prange`` loop (a distinct name, so the two have
    distinct on-disk caches)."""
    twin = types.FunctionType(
        func.__code__, func.__globals__, f"{func.__name__}_parallel", func.__defaults__, func.__closure__
    )
    twin.__qualname__ = f"{func.__qualname__}_parallel"
    twin.__module__ = func.__module__
    serial = cast(F, numba.njit(**_FLAGS)(func))
    parallel = cast(F, numba.njit(parallel=True, **_FLAGS)(twin))
    return serial, parallel


def pick(pair: tuple[F, F], nodes: int) -> F:
    """The serial or the parallel twin for a call over ``nodes`` nodes."""
    return pair[1] if nodes >= PARALLEL_MIN_NODES else pair[0]
