"""MIG through NVIDIA's device plugin (the GPU Operator's, no DRA) through ``gpusched run`` on a real API server
(docs/devices.md, "MIG with NVIDIA's device plugin").

kwok nodes publish MIG devices as the device plugin does: a mixed-strategy node has ``nvidia.com/mig-1g.10gb`` and
``nvidia.com/mig-3g.40gb`` in its allocatable and no ``nvidia.com/gpu``; a single-strategy node has its MIG devices
as ``nvidia.com/gpu``, said by its labels (``nvidia.com/mig.strategy=single``, product ``...-MIG-1g.5gb``). Pods are
placed by count as kube-scheduler places them, no node is given more devices than it has, the one pod too many
waits with kube-scheduler's words, and the Queue's status counts each device as the share of a GPU its compute
slices are.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of

pytestmark = pytest.mark.e2e

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


def _mig_pod(name: str, resource: str, queue: str) -> dict[str, Any]:
    raw = kube_mod.pod(name, queue=queue)
    resources = raw["spec"]["containers"][0]["resources"]
    resources["limits"] = {resource: "1"}  # an extended resource is asked in limits (requests default to them)
    return raw


def _used(pods: list[dict[str, Any]], node: str, resource: str) -> int:
    total = 0
    for p in pods:
        if node_of(p) == node and not p["metadata"].get("deletionTimestamp"):
            for c in p["spec"]["containers"]:
                total += int((c.get("resources", {}).get("limits") or {}).get(resource, 0))
    return total


def test_device_plugin_mig_pods_are_placed_by_count_and_counted_as_their_share_of_a_gpu(sched: Scenario) -> None:
    mixed, single = f"{sched.name[:20]}-mixed", f"{sched.name[:20]}-single"
    mixed_node = kube_mod.gpu_node(mixed, gpus=0, labels={"nvidia.com/mig.strategy": "mixed"})
    mixed_node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
    for key in ("capacity", "allocatable"):
        mixed_node["status"][key] |= {MIG_1G: "7", MIG_3G: "2"}
    # One A100-40GB cut in 7 x 1g.5gb under the single strategy: GPU feature discovery labels the product with the
    # profile and the memory with the MIG device's; the device plugin publishes the 7 devices as nvidia.com/gpu.
    single_node = kube_mod.gpu_node(
        single,
        gpus=7,
        product="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        gpu_memory_mib=4864,
        labels={"nvidia.com/mig.strategy": "single"},
    )
    del single_node["metadata"]["annotations"]["gpusched.io/gpu-topology"]  # not published for MIG devices
    sched.add_nodes([mixed_node, single_node])
    queue = f"{sched.name}-mig"
    sched.create_queue(kube_mod.queue(queue))
    sched.start_gpusched()

    small = [f"small-{i}" for i in range(8)]
    large = ["large-0", "large-1"]
    slices = [f"slice-{i}" for i in range(8)]
    for name in small:
        sched.create_pod(_mig_pod(name, MIG_1G, queue))
    for name in large:
        sched.create_pod(_mig_pod(name, MIG_3G, queue))
    for name in slices:
        # nvidia.com/gpu on the single-strategy node: the model names its MIG profile, so no other node would do.
        sched.create_pod(kube_mod.pod(name, gpus=1, queue=queue, gpu_model="MIG-1g.5gb"))

    def seven_and_seven() -> list[dict[str, Any]] | None:
        pods = sched.pods()
        bound = [p for p in pods if node_of(p)]
        return pods if len(bound) == 7 + 2 + 7 else None

    pods = kube_mod.wait_until(seven_and_seven, timeout=120, what="16 of the 18 pods bound", describe=sched.describe)
    where = {p["metadata"]["name"]: node_of(p) for p in pods}
    assert {where[n] for n in large} == {mixed}
    assert {where[n] for n in small if where[n]} == {mixed} and sum(1 for n in small if not where[n]) == 1
    assert {where[n] for n in slices if where[n]} == {single} and sum(1 for n in slices if not where[n]) == 1
    # The device plugin picks the MIG devices: gpusched names none.
    assert all(not kube_mod.gpu_ids_of(p) for p in pods), kube_mod.summary(pods)
    # No node given more than it has, of any resource.
    assert (_used(pods, mixed, MIG_1G), _used(pods, mixed, MIG_3G)) == (7, 2)
    kube_mod.check_no_overcommit(pods, sched.my_nodes())
    waiting_small = next(n for n in small if not where[n])
    waiting_slice = next(n for n in slices if not where[n])
    sched.wait_event(waiting_small, "FailedScheduling")
    events = [e.get("message", "") for e in sched.kube.events(sched.namespace, name=waiting_small)]
    assert any(f"Insufficient {MIG_1G}" in m for m in events), events
    sched.wait_event(waiting_slice, "FailedScheduling")

    # The queue: 7 x 1g (142) + 2 x 3g (428) + 7 x 1g.5gb (142) = 2.844 GPUs, and each mixed profile by its name.
    def counted() -> dict[str, Any] | None:
        status = sched.kube.request("GET", kube_mod.Kube.custom_path("queues", name=queue)).get("status", {})
        allocated = status.get("allocated", {})
        return status if allocated.get("nvidia.com/gpu") == "2.844" else None

    status = kube_mod.wait_until(counted, timeout=30, what="the queue holding 2.844 GPUs", describe=sched.describe)
    assert (status["allocated"][MIG_1G], status["allocated"][MIG_3G]) == ("7", "2")

    # A device freed on each node goes to the pod that waited for it.
    sched.delete_pod(next(n for n in small if where[n]))
    sched.delete_pod(next(n for n in slices if where[n]))
    sched.wait_bound([waiting_small, waiting_slice], timeout=90)
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())
