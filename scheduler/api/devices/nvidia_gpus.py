"""NVIDIA's GPUs among the DRA devices.

A device of NVIDIA's DRA driver (driver ``gpu.nvidia.com``, attribute ``type`` = ``gpu``) is a whole GPU
(:func:`is_gpu`); such devices are what the scheduler counts as a node's GPUs and a pod's GPUs (see
``scheduler.cache.device_store``). Their order on the node (the GPU index gpusched uses, as in
``gpusched.io/gpu-ids``) is the number in the device name (``gpu-3``), as the driver names devices by minor number.

MIG devices (attribute ``type`` = ``mig``: static MIG instances, or the placements NVIDIA's driver publishes for dynamic
MIG) are a fraction of a GPU (:func:`mig_milli`): their compute slices (the ``<n>g`` of the ``profile`` attribute,
``3g.40gb``: 3) of the GPU's (7 on every MIG-capable NVIDIA GPU but the A30, which has 4), in milli-GPUs rounded
down, so that the partitions one GPU can hold never add up to more than 1000 (seven 1g: 7 x 142 = 994).

NVIDIA's device plugin (the GPU Operator's) publishes MIG devices without DRA, by a MIG strategy the node labels
say (``nvidia.com/mig.strategy``): *mixed*, each profile an extended resource of its own (``nvidia.com/mig-1g.10gb``,
:func:`device_plugin_profile`); *single*, every GPU of the node cut alike and its devices published as
``nvidia.com/gpu``, the profile at the end of the product label (``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``,
:func:`single_strategy_profile`). Either way a device is the same share of a GPU (:func:`profile_milli`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from scheduler.api.basics.resources import MILLI_PER_GPU
from scheduler.api.devices.dra import GPU_DRIVER, Device

_NUMBER = re.compile(r"(\d+)")
_MIG_COMPUTE = re.compile(r"(?:^|\.)(\d+)g\.")
#: Compute slices of a MIG-capable GPU (A100, H100, H200, B200...); the A30 has 4.
MIG_COMPUTE_SLICES = 7
MIG_COMPUTE_SLICES_A30 = 4
#: The profiles only the A30 has (4 compute slices): a device plugin's resource name is all a pending pod says.
A30_PROFILES = frozenset({"1g.6gb", "2g.12gb", "4g.24gb"})
#: The prefix of the extended resources NVIDIA's device plugin publishes MIG devices as (mixed strategy).
DEVICE_PLUGIN_MIG_PREFIX = "nvidia.com/mig-"
#: The GPU Operator's node labels: the MIG strategy of the node's device plugin, and the product (GPU feature
#: discovery appends ``-MIG-<profile>`` to it under the single strategy).
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
_SINGLE_PRODUCT = re.compile(r"-MIG-(\d+g\.[^-]+)$")
_MODEL_PROFILE = re.compile(r"(?:^|-)MIG-(\d+g\.[^-]+)$")


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
    product = device.attributes.get(f"{GPU_DRIVER}/productName")
    return profile_milli(profile, product=product) if isinstance(profile, str) else 0


def profile_milli(profile: str, *, product: object = "") -> int:
    """The share of a GPU a device of MIG ``profile`` (``3g.40gb``) is, in milli-GPUs rounded down: its compute
    slices of the GPU's, 4 on an A30 (said by ``product``, or by a profile only the A30 has), 7 on the others; 0
    when the profile does not say its compute slices."""
    found = _MIG_COMPUTE.search(profile)
    if found is None:
        return 0
    a30 = (isinstance(product, str) and "A30" in product.upper()) or profile.partition("+")[0] in A30_PROFILES
    total = MIG_COMPUTE_SLICES_A30 if a30 else MIG_COMPUTE_SLICES
    return min(MILLI_PER_GPU, MILLI_PER_GPU * int(found.group(1)) // total)


def device_plugin_profile(resource: str) -> str:
    """The MIG profile of an extended resource of NVIDIA's device plugin (``nvidia.com/mig-1g.10gb``: ``1g.10gb``),
    or "" for any other resource."""
    if not resource.startswith(DEVICE_PLUGIN_MIG_PREFIX):
        return ""
    profile = resource.removeprefix(DEVICE_PLUGIN_MIG_PREFIX)
    return profile if _MIG_COMPUTE.search(profile) else ""


def device_plugin_mig_milli(resource: str) -> int:
    """The share of a GPU one unit of ``resource`` is when it is a MIG device of NVIDIA's device plugin (mixed
    strategy: ``nvidia.com/mig-3g.40gb`` is 428), else 0."""
    profile = device_plugin_profile(resource)
    return profile_milli(profile) if profile else 0


def single_strategy_profile(labels: Mapping[str, str]) -> str:
    """The MIG profile of the devices a node publishes as ``nvidia.com/gpu`` when its device plugin runs the single
    strategy on MIG GPUs (label ``nvidia.com/mig.strategy=single``, product ``...-MIG-1g.5gb``), else ""."""
    if labels.get(LABEL_MIG_STRATEGY) != "single":
        return ""
    found = _SINGLE_PRODUCT.search(labels.get(LABEL_GPU_PRODUCT, ""))
    return found.group(1) if found and _MIG_COMPUTE.search(found.group(1)) else ""


def gpu_order(device: Device) -> tuple[int, str]:
    """The order of a node's GPUs: the number in the device name (``gpu-12``), then the name."""
    found = _NUMBER.search(device.name)
    return (int(found.group(1)) if found else 1 << 30, device.name)


def asked_single_strategy_milli(node_selector: Mapping[str, str], models: Sequence[str]) -> int:
    """The share of a GPU each ``nvidia.com/gpu`` of a pod is, known before it is placed, when the pod can only go
    to single-strategy nodes of a MIG profile: its node selector names a MIG product (``...-MIG-1g.5gb``), or every
    model it allows (``gpusched.io/gpu-model``) ends with one (``MIG-1g.5gb``; the largest share among them). 0 when
    the pod may get whole GPUs."""
    product = node_selector.get(LABEL_GPU_PRODUCT, "")
    found = _SINGLE_PRODUCT.search(product)
    if found:
        return profile_milli(found.group(1), product=product)
    shares = []
    for model in models:
        named = _MODEL_PROFILE.search(model)
        share = profile_milli(named.group(1), product=model) if named else 0
        if not share:
            return 0
        shares.append(share)
    return max(shares, default=0)
