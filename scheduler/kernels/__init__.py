"""numba kernels over plain numpy arrays: one call scores or fits every node.

Each public function validates its arguments and calls a private ``@jit`` twin; ``scheduler.kernels.reference``
holds a NumPy implementation of the same name for every kernel, used by the tests and the benchmark.
Imports numpy and numba only.
"""
