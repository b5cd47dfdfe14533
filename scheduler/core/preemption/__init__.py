"""Preemption and reclaim: the victim searches over what-ifs of the snapshot, the nominations they leave, and the per-
node arithmetic of who may evict whom."""
