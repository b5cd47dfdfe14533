"""Pure types and their parsers, no I/O and no choices of the scheduler's, grouped by what they describe:

- ``basics``: quantities, resource vectors, field readers, the one error type;
- ``objects``: Kubernetes objects as the scheduler reads them (pods, nodes, selectors, affinity, disruption budgets,
  volumes, host ports, the workloads that own pods);
- ``devices``: what reaches a container (DRA claims and slices with their CEL, extended resources, HAMi shares,
  GPU topology, NVIDIA models and MIG profiles) and the NUMA zones and Topology Manager a node's kubelet applies;
- ``crds``: gpusched's own objects (PodGroup, Queue, Topology).

Invalid input raises :class:`scheduler.api.basics.errors.InvalidObject`, naming the object and the field. Policy
over these types lives elsewhere (fair shares in ``scheduler.queue.fairshare``, the typical pods FGD scores against
in ``scheduler.framework.typical``).
"""
