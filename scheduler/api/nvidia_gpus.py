"""NVIDIA's GPUs among the DRA devices.

A device of NVIDIA's DRA driver (driver ``gpu.nvidia.com``, attribute ``type`` = ``gpu``) is a whole GPU
(:func:`is_gpu`); such devices are what the scheduler counts as a node's GPUs and a pod's GPUs (see
``scheduler.cache.device_store``). Their order on the node (the GPU index gpusched uses, as in
``gpusched.io/gpu-ids``) is the number in the device name (``gpu-3``), as the driver names devices by minor number.

MIG devices (attribute ``type`` = ``mig``: static MIG instances, or the placements NVIDIA's driver publishes for dynamic
MIG) are a fraction of a GPU (:func:`mig_milli`): their compute slices (the ``<n>g`` of the ``profile`` attribute,
``3g.40gb``: 3) of the GPU's (7 on every MIG-capable NVIDIA GPU but the A30, which has 4), in milli-GPUs rounded
down, so that the partitions one GPU can hold never add up to more than 1000 (seven 1g: 7 x 142 = 994).
"""

from __future__ import annotations

import re

from scheduler.api.dra import GPU_DRIVER, Device
from scheduler.api.resources import MILLI_PER_GPU

_NUMBER = re.compile(r"(\d+)")
_MIG_COMPUTE = re.compile(r"(?:^|\.)(\d+)g\.")
#: Compute slices of a MIG-capable GPU (A100, H100, H200, B200...); the A30 has 4.
MIG_COMPUTE_SLICES = 7
MIG_COMPUTE_SLICES_A30 = 4


def is_gpu(device: Device) -> bool:
    """A whole GPU of NVIDIA's DRA driver (not one shared by capacity)."""
    return device.driver == GPU_DRIVER and device.attributes.get(f"{GPU_DRIVER}/type") == "gpu" and not device.multiple


def is_mig(device: Device) -> bool:
    """A MIG device of NVIDIA's DRA driver (a static MIG instance, or a dynamic MIG placement)."""
    return device.driver == GPU_DRIVER and device.attributes.get(f"{GPU_DRIVER}/type") == "mig"


def mig_milli(device: Device) -> int:
    """The share of a GPU a MIG device is, in milli-GPUs (rounded down): its compute slices of the GPU's; 0 for a
    device that is not MIG or whose ``profile`` does not say its compute slices."""
    if not is_mig(device):
        return 0
    profile = device.attributes.get(f"{GPU_DRIVER}/profile")
    found = _MIG_COMPUTE.search(profile) if isinstance(profile, str) else None
    if found is None:
        return 0
    product = device.attributes.get(f"{GPU_DRIVER}/productName")
    total = MIG_COMPUTE_SLICES_A30 if isinstance(product, str) and "A30" in product.upper() else MIG_COMPUTE_SLICES
    return min(MILLI_PER_GPU, MILLI_PER_GPU * int(found.group(1)) // total)


def gpu_order(device: Device) -> tuple[int, str]:
    """The order of a node's GPUs: the number in the device name (``gpu-12``), then the name."""
    found = _NUMBER.search(device.name)
    return (int(found.group(1)) if found else 1 << 30, device.name)
