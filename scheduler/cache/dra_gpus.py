"""The GPUs that DRA gives pods and nodes, for the parts of the scheduler that count GPU slots (fit, the scores,
gangs, queue accounting): a pending pod's GPU request from its claims (:func:`claim_gpu_request`) or from extended
resources a DeviceClass maps (:func:`extended_gpu_request`), and a node's GPUs from the whole GPUs its
ResourceSlices publish (:func:`with_gpus`). What the devices are and who holds them is
:class:`scheduler.cache.device_store.DeviceStore`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scheduler.api.basics import resources as api_resources
from scheduler.api.basics.resources import MILLI_PER_GPU, NO_GPU, GpuRequest
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import nvidia_gpus
from scheduler.api.objects import node as api_node
from scheduler.api.objects.pod import PodRequest
from scheduler.cache.device_store import DeviceStore


def claim_gpu_request(store: DeviceStore, pod: PodRequest) -> GpuRequest | None:
    """The GPUs a pending pod's claims give it: the whole GPUs, or, with none, the share of one GPU of its one MIG
    device (:func:`pod_gpus`). For a claim of its own (:meth:`DeviceStore.owns`) that is allocated, its allocated
    devices; not allocated yet, what each ``ExactCount`` request of a GPU or MIG DeviceClass asks (admin access
    aside; for ``firstAvailable``, the smallest alternative's; a MIG request, the smallest share the devices it may get
    have). A claim shared with pods that allocated it holds its devices for them. None while a claim is not known.

    The request is the same before and after the pod's own allocation is written, so the pod weighs the same in its
    queue whichever the watch shows first. The GPUs it asks through an extended resource a DeviceClass that selects
    GPUs maps (other than ``nvidia.com/gpu``, counted with the pod) are added as whole GPUs."""
    whole = extended_gpus(store, pod)
    mig: list[int] = []
    for pod_claim in pod.resource_claims:
        if not pod_claim.claim_name:
            return None
        claim = store.claims.get(api_dra.claim_key(pod.namespace, pod_claim))
        if claim is None:
            return None
        allocation = store.allocation_of(claim.key)
        if allocation is not None:
            if store.owns(claim.key, pod):
                whole += len(store.gpu_devices(allocation))
                mig.extend(store.mig_devices(allocation))
            continue
        for request in claim.requests:
            # The least the request may get (firstAvailable: its smallest alternative; All: counted once allocated),
            # so that a node the smaller alternative fits is not filtered out by the GPU count.
            asks: list[tuple[int, int, list[int]]] = []
            for c in request.choices:
                counted = c.mode == api_dra.EXACT_COUNT and not (c.admin_access or c.capacity)
                share = store.mig_milli(c.device_class, c.selectors) if counted else 0
                if share:
                    asks.append((c.count * share, 0, [share] * c.count))
                elif counted and store.selects_gpus(c.device_class):
                    asks.append((c.count * MILLI_PER_GPU, c.count, []))
                else:
                    asks.append((0, 0, []))
            _milli, count, shares = min(asks)
            whole += count
            mig.extend(shares)
    return pod_gpus(whole, mig)


def pod_gpus(whole: int, mig: Sequence[int]) -> GpuRequest:
    """The pod's GPU request from the devices of its claims: its whole GPUs; with none and one MIG device, that
    device's share of its GPU. Several MIG devices, or MIG devices beside whole GPUs, are not counted (a pod's GPU
    request is whole GPUs or a share of one)."""
    if whole:
        return GpuRequest(count=whole, milli=MILLI_PER_GPU)
    if len(mig) == 1 and mig[0] > 0:
        return GpuRequest(count=1, milli=mig[0])
    return NO_GPU


def extended_gpu_request(store: DeviceStore, pod: PodRequest) -> PodRequest:
    """A pod without claims that asks extended resources, with the GPUs they are: ``nvidia.com/gpu`` mapped to a
    class of other devices than whole GPUs (NVIDIA's ``mig-1g-12gb.gpu.nvidia.com``) is not GPU slots but those
    devices, always from DRA (:meth:`DeviceStore.from_dra`); an implicit name of a class of whole GPUs is GPUs
    (:func:`extended_gpus`). A bound pod whose GPU ids gpusched wrote is left as it is."""
    if pod.gpu_ids or pod.resource_claims:
        return pod
    count = pod.gpu.count if pod.gpu.whole else 0
    gpu_class = store.extended_resource_class(api_resources.GPU) if count else None
    if gpu_class is not None and not store.selects_gpus(gpu_class.name):
        count = 0
    count += extended_gpus(store, pod)
    if count == (pod.gpu.count if pod.gpu.whole else 0):
        return pod
    gpu = api_resources.GpuRequest(count, api_resources.MILLI_PER_GPU, models=pod.gpu.models)
    return dataclasses.replace(pod, gpu=gpu if count else api_resources.NO_GPU)


def extended_gpus(store: DeviceStore, pod: PodRequest) -> int:
    """The whole GPUs a pod asks through extended resources other than ``nvidia.com/gpu`` (the implicit
    ``deviceclass.resource.kubernetes.io/gpu.nvidia.com``) that map to a DeviceClass selecting GPUs."""
    total = 0
    for name, amount in pod.resources.items() if pod.extended_asks else ():
        device_class = store.extended_resource_class(name)
        if device_class is not None and store.selects_gpus(device_class.name):
            total += amount
    return total


def with_gpus(info: api_node.NodeInfo, store: DeviceStore) -> api_node.NodeInfo:
    """A node that publishes whole GPUs through DRA and has none from a device plugin has those GPUs: their count,
    the smallest of their memories, the first one's product name (and the store notes the node in
    :attr:`DeviceStore.dra_gpu_nodes`)."""
    gpus = store.gpus(info.name)
    if not gpus or info.gpus:
        store.dra_gpu_nodes.discard(info.name)
        return info
    store.dra_gpu_nodes.add(info.name)
    memory = min((d.capacity.get(f"{d.driver}/memory", 0) for d in gpus if nvidia_gpus.is_gpu(d)), default=0) // 1000
    product = gpus[0].attribute("productName")
    return dataclasses.replace(
        info,
        gpus=len(gpus),
        gpu_memory=int(memory),
        gpu_model=info.gpu_model or (product if isinstance(product, str) else ""),
    )
