"""gpusched: a Kubernetes scheduler for GPU clusters.

The package is layered (see STYLE.md and the import-linter contracts in pyproject.toml):
``k8s`` and ``sim`` feed the ``core``, which drives ``plugins`` through the ``framework``; plugins read the
``cache`` and ``queue``, which hold state as arrays for the ``kernels``; ``api`` holds the pure types.
"""

#: The version, written here only: pyproject.toml reads it (setuptools' ``attr:``, without importing the package),
#: ``gpusched --version`` prints it, and manifests/kustomization.yaml's image tag and CHANGELOG.md's newest release
#: must say the same (tests/test_release.py). A release changes all three.
__version__ = "0.1.0"
