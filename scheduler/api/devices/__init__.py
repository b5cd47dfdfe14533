"""Devices: Dynamic Resource Allocation (claims, slices, CEL), extended resources, HAMi shares, GPU topology inside a
node, NVIDIA models and MIG profiles."""
