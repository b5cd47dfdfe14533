"""The benchmarks: scripts that print figures and ratios (speed is shown here, never asserted in tests).

A package, so that the scripts import each other and their shared harness (``benchmarks.harness``) as ordinary
modules: run one from the repository's root as ``python -m benchmarks.NAME [--help]``.
"""
