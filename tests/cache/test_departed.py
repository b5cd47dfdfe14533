"""A departed pod's GPUs stay taken in the cache while its ResourceClaims hold the devices, and come back once the
claims let them go: never twice, never lost with a node rebuilt or removed."""

from __future__ import annotations

import dataclasses

from scheduler.api.objects import pod as api_pod
from scheduler.kernels import layout
from tests.api import dra_objects as dra
from tests.api import objects
from tests.plugins.test_dra import DraCluster


def _running(cluster: DraCluster, name: str, *, owner: str = "", reserved_for: tuple[str, ...] = ()) -> str:
    """Pod ``name`` runs on node ``a`` with GPU 0, the device its claim ``<name>-gpus`` (allocated) holds."""
    allocation = dra.allocation("a", "gpu-0")
    owner = owner if owner or reserved_for else name
    cluster.claim(
        dra.claim(f"{name}-gpus", dra.request(count=1), owner=owner, allocation=allocation, reserved_for=reserved_for)
    )
    raw = dra.with_claims(
        objects.pod(name, cpu="2", node_name="a", annotations={api_pod.ANNOTATION_GPU_IDS: "0"}), f"{name}-gpus"
    )
    pod = cluster.pod(raw)
    assert pod.gpu.count == 1
    cluster.cache.upsert_pod(pod)
    return pod.key


def _free(cluster: DraCluster) -> tuple[float, float]:
    """GPU 0's free share and the CPU used, on node ``a``."""
    a = cluster.cache.arrays
    return float(a.gpu_free[0, 0]), float(a.used[0, layout.CPU])


def test_a_departed_pods_gpus_stay_taken_until_its_claim_lets_them_go() -> None:
    cluster = DraCluster(("a",), gpus=2)
    key = _running(cluster, "r")
    assert _free(cluster) == (0.0, 2000.0)
    cluster.cache.remove_pod(key, departed=True)
    assert _free(cluster) == (0.0, 0.0)  # its CPU is free, its GPU still the claim's
    assert not cluster.cache.settle_departed()  # the claim still holds it
    cluster.store.remove_claim("default/r-gpus")
    assert cluster.cache.settle_departed()
    assert _free(cluster) == (layout.WHOLE, 0.0)
    assert not cluster.cache.settle_departed()  # freed once
    assert _free(cluster) == (layout.WHOLE, 0.0)


def test_a_deallocated_claim_or_one_reserved_for_another_pod_lets_the_gpus_go() -> None:
    cluster = DraCluster(("a",), gpus=2)
    cluster.cache.remove_pod(_running(cluster, "r"), departed=True)
    deallocated = dra.claim("r-gpus", dra.request(count=1), owner="r")
    deallocated["metadata"]["resourceVersion"] = "2"
    cluster.claim(deallocated)
    assert cluster.cache.settle_departed()  # deallocated
    assert _free(cluster)[0] == layout.WHOLE
    # A claim used by the departed pod alone, then reserved for another pod: its GPU is that pod's to count.
    cluster.cache.remove_pod(_running(cluster, "s", reserved_for=("s",)), departed=True)
    assert _free(cluster)[0] == 0.0
    allocated = dra.claim("s-gpus", dra.request(count=1), allocation=dra.allocation("a", "gpu-0"), reserved_for=("t",))
    allocated["metadata"]["resourceVersion"] = "2"
    cluster.claim(allocated)
    assert cluster.cache.settle_departed()
    assert _free(cluster)[0] == layout.WHOLE


def test_nothing_is_held_for_a_failed_binding_or_a_claim_shared_with_other_pods() -> None:
    cluster = DraCluster(("a",), gpus=2)
    cluster.cache.remove_pod(_running(cluster, "r"))  # not departed: a binding that failed, a pod moved
    assert _free(cluster)[0] == layout.WHOLE
    cluster.cache.remove_pod(_running(cluster, "s", reserved_for=("s", "t")), departed=True)
    assert _free(cluster)[0] == layout.WHOLE  # the claim holds the GPU for pod t, which counts it itself
    assert len(cluster.cache.departed) == 0


def test_a_rebuilt_node_keeps_the_held_gpus_and_a_removed_one_drops_them() -> None:
    cluster = DraCluster(("a",), gpus=2)
    cluster.cache.remove_pod(_running(cluster, "r"), departed=True)
    info = cluster.cache.nodes[0].info
    cluster.cache.upsert_node(dataclasses.replace(info, allocatable={**info.allocatable, "cpu": 16000}))
    assert _free(cluster)[0] == 0.0  # the row rebuilt from its pods takes the hold again
    cluster.store.remove_claim("default/r-gpus")
    assert cluster.cache.settle_departed()
    assert _free(cluster)[0] == layout.WHOLE
    cluster.cache.remove_pod(_running(cluster, "s"), departed=True)
    cluster.cache.remove_node("a")
    cluster.cache.upsert_node(info)
    assert _free(cluster)[0] == layout.WHOLE  # the node came back empty
    cluster.store.remove_claim("default/s-gpus")
    assert not cluster.cache.settle_departed()  # dropped with the node: never freed twice
    assert _free(cluster)[0] == layout.WHOLE
