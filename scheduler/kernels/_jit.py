"""The numba settings for every kernel, in one place.

``cache=True`` keeps compiled machine code on disk (``NUMBA_CACHE_DIR`` moves it, e.g. to an emptyDir in a
read-only container); ``nogil`` lets the operator score on a thread; ``fastmath`` stays off so that kernels
agree with their NumPy references to 1e-9 and results do not depend on the CPU's vector width.
Set ``NUMBA_DISABLE_JIT=1`` to run the kernels as plain Python (coverage, debugging).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])


def jit(func: F) -> F:
    """Compile ``func`` in nopython mode with the project's flags."""
    return cast(F, numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")(func))
