"""gpusched's own objects (group scheduling.gpusched.io): PodGroup, Queue, Topology."""
