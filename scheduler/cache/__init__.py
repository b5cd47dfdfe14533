"""Cluster state as arrays: nodes x resources, GPU devices, assume / confirm / forget, snapshots and what-ifs."""
