"""Before a process's first kernel: what numba need not look for, since no kernel uses it.

Separate from the kernels' numba settings (``scheduler.kernels._jit``) because only ``gpusched run`` calls it, for its
start-up (docs/operator.md, "Start-up after a restart"); the simulator and the tests load kernels as numba does.
"""

from __future__ import annotations

import importlib
import sys

#: Packages numba uses when they are installed, for what no kernel here does: scipy's BLAS and LAPACK (``np.dot``,
#: ``np.linalg``) and cffi for calling cffi functions. The operator image carries neither (requirements.lock); a
#: development environment has both, for the simulator and the tests. (``import numba`` itself imports the top of
#: scipy, to check its version: a few milliseconds.)
UNUSED_BY_KERNELS = ("scipy.linalg", "cffi")


def skip_unused_support() -> None:
    """Let numba find none of :data:`UNUSED_BY_KERNELS`, as where they are not installed; call before a kernel first
    runs in the process.

    The first time a process loads a kernel (from numba's cache or by compiling it), numba imports its own support
    for BLAS and cffi, and that looks for scipy (importing ``scipy.linalg``) and builds a cffi parser: 0.3 s of CPU
    at every start of ``gpusched run`` where they are installed (docs/operator.md, "Start-up after a restart"), for
    nothing any kernel calls. Here numba's two support modules are imported while those packages cannot be, so numba
    records that it has neither, exactly as in the operator image, and the packages import normally afterwards
    (numba's choice is made once). Does nothing for a package already imported, or once numba has looked.
    """
    blocked = [name for name in UNUSED_BY_KERNELS if name not in sys.modules]
    if not blocked or "numba.np.arraymath" in sys.modules:
        return
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # Python's way to make an import fail: "not installed"
    try:
        importlib.import_module("numba.core.typing.cffi_utils")  # its ``import cffi`` fails: no cffi support
        importlib.import_module("numba.np.arraymath")  # its BLAS check (``import scipy.linalg``) fails: no BLAS
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
