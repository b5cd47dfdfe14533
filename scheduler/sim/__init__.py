"""The trace-driven simulator: the same cache, core and plugins as the operator, with a simulated cluster and
binder, trace loaders, workload generators, the FGD evaluation protocol, metrics, reports and plots."""
