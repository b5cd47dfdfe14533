"""The column layout of the cluster arrays that every kernel reads.

``cap`` and ``used`` are float64 arrays of shape (nodes, resources). The first five columns are fixed; extended
resources (``rdma/hca``, ``example.com/foo``) take the columns after them, in the order they were first seen.
GPU compute and GPU memory columns are node totals kept in step with the per-device table
(``gpu_free`` milli and ``gpu_mem_free`` bytes, shape (nodes, max GPUs per node)), so a kernel can score a node
by its totals and fit a pod by its devices.
"""

from __future__ import annotations

CPU = 0  # milli-cores
MEMORY = 1  # bytes
PODS = 2  # count
GPU_MILLI = 3  # milli-GPUs, 1000 per device
GPU_MEMORY = 4  # bytes of device memory
FIXED = 5

#: Milli of one whole GPU.
WHOLE = 1000.0

# Why a node does not fit (the first reason found); RESOURCE + column for "Insufficient <resource>".
FIT = 0
ABSENT = 1
UNSCHEDULABLE = 2
TAINT = 3
SELECTOR = 4
GPU_MODEL = 5
GPU_COUNT = 6
GPU_SHARE = 7
GPU_MEMORY_SHORT = 8
RESERVED = 9
TOPOLOGY = 10
#: A pod there holds a host port the pod asks for (the ports plugin).
PORTS = 11
#: Inter-pod affinity (the interpod plugin): the pod's affinity, its anti-affinity, existing pods' anti-affinity.
POD_AFFINITY = 12
POD_ANTI_AFFINITY = 13
EXISTING_ANTI_AFFINITY = 14
#: Pod topology spread (the topology_spread plugin): the skew, and a node without the topology key. Codes 1..15
#: are all taken, so further reasons count down from -2 (-1 is left unused).
SPREAD = 15
SPREAD_MISSING_LABEL = -2
#: Volumes (the volumes plugin): a bound claim's volume is not reachable from the node (its node affinity; its
#: zone labels), no volume to bind or provision there, a bound claim's volume does not exist, the node's CSI
#: attach limit would be exceeded.
VOLUME_NODE_CONFLICT = -3
VOLUME_BIND_CONFLICT = -4
VOLUME_MISSING = -5
VOLUME_ZONE = -6
VOLUME_LIMIT = -7
#: ResourceClaims (the dra plugin): the claims cannot all be allocated from the node's free devices; an allocated
#: claim's devices are on another node.
DRA_CANNOT_ALLOCATE = -8
DRA_CLAIM_NODE = -9
RESOURCE = 16
