"""Before the operator's first kernel (scheduler.kernels.loading): numba finds neither scipy's BLAS nor cffi, as in
the operator image, the kernels still run, and both packages import normally afterwards.

In a fresh interpreter: numba decides once per process, and this one has decided already.
"""

from __future__ import annotations

import json
import subprocess
import sys


def test_numba_skips_what_no_kernel_uses_and_the_kernels_still_load() -> None:
    code = (
        "import json, sys\n"
        "from scheduler.kernels import loading\n"
        "loading.skip_unused_support()\n"
        "skipped = [name for name in loading.UNUSED_BY_KERNELS if name in sys.modules]\n"
        "from scheduler.k8s import config, operator\n"
        "placed = operator.warm_kernels(config.load(None))\n"
        "import numba.core.typing.cffi_utils as cffi_support, numba.np.arraymath as arraymath\n"
        "import cffi, scipy.linalg\n"
        "print(json.dumps({'loaded before': skipped, 'placed': placed, 'blas': arraymath._HAVE_BLAS,"
        " 'cffi': cffi_support.SUPPORTED, 'later': [cffi.__name__, scipy.linalg.__name__]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "loaded before": [],
        "placed": 2,
        "blas": False,
        "cffi": False,
        "later": ["cffi", "scipy.linalg"],
    }
