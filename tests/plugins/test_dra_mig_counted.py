"""MIG devices counted as the share of a GPU their compute slices are: a pod whose claim gets one MIG device (a
dynamic MIG placement, or a static MIG instance) holds that share of its parent GPU's slot, so fit, FGD and the
queues' usage, guarantees and limits see it as they see a shared GPU."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.resources import GpuRequest
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import nvidia_gpus
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.framework.interface import Decision
from scheduler.k8s.ports import binder
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import dra_objects as dra
from tests.api import objects
from tests.core.harness import Clock, Events
from tests.plugins.test_dra import DraCluster, pod_with
from tests.plugins.test_dra_partitions import mig_cluster


def _mig(profile: str, product: str = "NVIDIA H100 80GB HBM3") -> api_dra.Device:
    attributes = {f"{dra.DRIVER}/type": "mig", f"{dra.DRIVER}/profile": profile, f"{dra.DRIVER}/productName": product}
    return api_dra.Device(dra.DRIVER, "a", f"mig-{profile}", attributes)


@pytest.mark.parametrize(
    ("profile", "product", "milli"),
    [
        ("1g.10gb", "NVIDIA H100 80GB HBM3", 142),
        ("2g.20gb", "NVIDIA H100 80GB HBM3", 285),
        ("3g.40gb", "NVIDIA H100 80GB HBM3", 428),
        ("4g.40gb", "NVIDIA H100 80GB HBM3", 571),
        ("7g.80gb", "NVIDIA H100 80GB HBM3", 1000),
        ("1c.3g.40gb", "NVIDIA A100-SXM4-80GB", 428),  # a compute instance of a 3g GPU instance
        ("2g.12gb", "NVIDIA A30", 500),  # the A30 has 4 compute slices
        ("mystery", "NVIDIA H100 80GB HBM3", 0),
    ],
)
def test_a_mig_device_is_its_compute_slices_of_a_gpu_rounded_down(profile: str, product: str, milli: int) -> None:
    assert nvidia_gpus.mig_milli(_mig(profile, product)) == milli


def test_the_partitions_one_gpu_holds_never_add_up_to_more_than_one_gpu() -> None:
    shares = {p: nvidia_gpus.mig_milli(_mig(p)) for p in dra.MIG_PROFILES}
    assert 7 * shares["1g.10gb"] <= 1000
    assert shares["3g.40gb"] + shares["4g.40gb"] <= 1000
    assert 3 * shares["2g.20gb"] + shares["1g.10gb"] <= 1000
    whole = api_dra.Device(dra.DRIVER, "a", "gpu-0", {f"{dra.DRIVER}/type": "gpu"})
    assert nvidia_gpus.mig_milli(whole) == 0


def _decide(cluster: DraCluster, name: str, *requests: dict[str, Any]) -> Decision:
    cluster.claim(dra.claim(name, *requests))
    result = cluster.schedule(pod_with(f"p-{name}", name))
    assert result.decision is not None, result.status.message
    return result.decision


def test_a_dynamic_mig_claim_holds_its_share_of_its_parent_gpus_slot() -> None:
    cluster = mig_cluster(gpus=2)
    cluster.claim(dra.claim("c3", dra.mig_request("3g.40gb")))
    assert cluster.pod(pod_with("p", "c3")).gpu == GpuRequest(count=1, milli=428)
    decision = _decide(cluster, "big", dra.mig_request("4g.40gb"))
    (device,) = [d.device for c in decision.claims for d in c.devices]
    parent = int(device.split("-")[1])
    assert decision.gpu_ids == (parent,)
    assert cluster.free_devices("a")[parent] == 1000 - 571
    decision = _decide(cluster, "mid", dra.mig_request("3g.40gb"))
    assert decision.gpu_ids == (parent,)  # the fullest GPU it fits: the 4g's
    assert cluster.free_devices("a")[parent] == 1000 - 571 - 428
    # A whole GPU claim goes to the untouched GPU, and the GPU arrays agree: no whole GPU is left.
    decision = _decide(cluster, "whole", dra.request(count=1))
    assert decision.gpu_ids == (1 - parent,)
    assert cluster.free_devices("a")[1 - parent] == 0.0
    cluster.claim(dra.claim("small", dra.mig_request("1g.10gb")))
    assert cluster.schedule(pod_with("p-small", "small")).decision is None


def test_a_static_mig_gpu_is_a_slot_and_its_instances_hold_their_shares_of_it() -> None:
    # Two GPUs in MIG mode, published only as their instances (as NVIDIA's driver publishes static MIG): one 3g and
    # one 4g each, named by the parent's index.
    instances = [
        {
            "name": f"gpu-{g}-mig-{i}",
            "attributes": {
                "type": {"string": "mig"},
                "profile": {"string": profile},
                "parentUUID": {"string": f"GPU-a-{g:04d}"},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
            },
            "capacity": {"memory": {"value": "40Gi"}},
        }
        for g in range(2)
        for i, profile in enumerate(("3g.40gb", "4g.40gb"))
    ]
    cluster = DraCluster(("a",), gpus=0)
    cluster.store.upsert_class(api_dra.parse_device_class(dra.mig_class()))
    cluster.slice(dra.gpu_slice("a", 0, extra=instances, name="a-mig"))
    assert cluster.cache.nodes[0].info.gpus == 2
    used = [0, 0]
    for name, profile, milli in (("x", "4g.40gb", 571), ("y", "3g.40gb", 428), ("z", "4g.40gb", 571)):
        decision = _decide(cluster, name, dra.mig_request(profile))
        (device,) = [d.device for c in decision.claims for d in c.devices]
        parent = int(device.split("-")[1])
        assert decision.gpu_ids == (parent,)
        used[parent] += milli
        assert [1000 - free for free in cluster.free_devices("a")] == used


def _queue_loop(cluster: DraCluster) -> tuple[SchedulingLoop, Clock, Events]:
    clock = Clock()
    events = Events()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    return loop, clock, events


def _queued(cluster: DraCluster, name: str, profile: str, queue: str) -> api_pod.PodRequest:
    cluster.claim(dra.claim(name, dra.mig_request(profile)))
    raw = dra.with_claims(objects.pod(f"p-{name}", labels={"gpusched.io/queue": queue}), name)
    return cluster.pod(raw)


def test_a_queues_gpu_limit_counts_mig_shares_and_stops_the_claim_that_would_pass_it() -> None:
    cluster = mig_cluster(gpus=2)
    loop, clock, events = _queue_loop(cluster)
    loop.queues_changed([QueueSpec(name="team", limit={"nvidia.com/gpu": 1})])
    loop.pod_pending(_queued(cluster, "c4", "4g.40gb", "team"))
    loop.pod_pending(_queued(cluster, "c3", "3g.40gb", "team"))
    loop.run_until_idle()
    assert sorted(d.pod.name for d in cluster.binder.decisions) == ["p-c3", "p-c4"]
    assert loop.held("team")["nvidia.com/gpu"] == pytest.approx(0.999)
    # A 1g more would be 1.141 GPUs, above the ceiling of 1: it waits, though a GPU is free.
    loop.pod_pending(_queued(cluster, "c1", "1g.10gb", "team"))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 2
    message = next(m for o, r, m in events.seen if o == "pod default/p-c1" and r == "FailedScheduling")
    assert "queue 'team' would hold" in message and "above its ceiling 1" in message
    # The 3g leaves: the 1g runs.
    cluster.cache.remove_pod("default/p-c3")
    cluster.scheduler.bind_failed("default/p-c3")
    loop.pod_gone("default/p-c3")
    clock.now = 5.0
    loop.cluster_event("pod deleted")
    loop.run_until_idle()
    assert cluster.binder.decisions[-1].pod.name == "p-c1"


def test_a_mig_pods_share_is_in_its_binding_and_read_back_from_it() -> None:
    cluster = mig_cluster(gpus=1)
    decision = _decide(cluster, "c3", dra.mig_request("3g.40gb"))
    annotations = binder.binding(decision)["metadata"]["annotations"]
    assert annotations == {"gpusched.io/gpu-ids": "0", "gpusched.io/gpu-milli": "428"}
    # After a restart the bound pod is read with what it holds: the share of GPU 0.
    bound = api_pod.parse_pod(dra.with_claims(objects.pod("p-c3", node_name="a", annotations=annotations), "c3"))
    assert (bound.gpu, bound.gpu_ids) == (GpuRequest(count=1, milli=428), (0,))
