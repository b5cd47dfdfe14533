"""Kubernetes objects as the scheduler reads them: pods, nodes, selectors, affinity, disruption budgets, volumes, host
ports, the workloads that own pods."""
