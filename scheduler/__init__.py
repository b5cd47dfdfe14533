"""gpusched: a Kubernetes scheduler for GPU clusters.

The package is layered (see STYLE.md and the import-linter contracts in pyproject.toml):
``k8s`` and ``sim`` feed the ``core``, which drives ``plugins`` through the ``framework``; plugins read the
``cache`` and ``queue``, which hold state as arrays for the ``kernels``; ``api`` holds the pure types.
"""

__version__ = "0.1.0"
