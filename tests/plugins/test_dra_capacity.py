"""Consumable capacity in the allocator (KEP 5075, as kube-scheduler v1.36 allocates it): a device that allows
multiple allocations is shared by claims each consuming part of its memory, rounded up by the device's request
policy, never more than it has, across decisions in flight, a failed binding, a restart (state rebuilt from the
claims' ``consumedCapacity``) and any order of claims coming and going."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.devices import consumable_capacity as cc
from scheduler.api.devices import dra as api_dra
from scheduler.core import gang
from tests.api import dra_objects as dra
from tests.plugins.test_dra import DraCluster, pod_with

GI = 1024**3


def shared_gpu_slice(node: str, gpus: int = 1) -> dict[str, Any]:
    """GPUs published to be shared by memory: 80Gi each, asked in steps of 10Gi (10Gi when a claim asks none)."""
    raw = dra.gpu_slice(node, gpus)
    for device in raw["spec"]["devices"]:
        device["allowMultipleAllocations"] = True
        device["attributes"]["shareable"] = {"bool": True}
        device["capacity"]["memory"]["requestPolicy"] = {
            "default": "10Gi",
            "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"},
        }
    return raw


SHARED_CLASS = "shared-gpu"


def memory_claim(name: str, memory: str | None, device_class: str = SHARED_CLASS) -> dict[str, Any]:
    raw = dra.claim(name, dra.request(count=1, device_class=device_class))
    if memory is not None:
        raw["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return raw


def cluster(gpus: int = 1, plugins: tuple[str, ...] = ("fit", "gpu", "dra")) -> DraCluster:
    c = DraCluster(("a",), plugins=plugins, gpus=0)
    c.slice(shared_gpu_slice("a", gpus))
    shared = dra.gpu_class(SHARED_CLASS, f"device.attributes['{dra.DRIVER}'].shareable")
    c.store.upsert_class(api_dra.parse_device_class(shared))
    return c


def place(
    c: DraCluster, name: str, memory: str | None, device_class: str = SHARED_CLASS
) -> list[tuple[str, str, tuple[tuple[str, int], ...]]] | None:
    c.claim(memory_claim(name, memory, device_class))
    result = c.schedule(pod_with(f"p-{name}", name))
    if result.decision is None:
        return None
    return [(d.device, d.share_id, d.consumed) for cl in result.decision.claims for d in cl.devices]


def test_claims_share_a_device_up_to_its_capacity_rounded_by_its_policy() -> None:
    c = cluster()
    assert c.cache.nodes[0].info.gpus == 0  # a shared device is not a whole GPU slot
    memory = "gpu.nvidia.com/memory"
    # 25Gi is 30Gi under a 10Gi step; a claim asking none takes the default 10Gi.
    assert place(c, "x", "25Gi") == [("gpu-0", cc.NEW_SHARE, ((memory, 30 * GI * 1000),))]
    assert place(c, "y", "30Gi") == [("gpu-0", cc.NEW_SHARE, ((memory, 30 * GI * 1000),))]
    assert place(c, "z", None) == [("gpu-0", cc.NEW_SHARE, ((memory, 10 * GI * 1000),))]
    # 70Gi are used: 11Gi (20Gi) does not fit, 10Gi does; then the device is full.
    assert place(c, "big", "11Gi") is None
    assert place(c, "last", "10Gi") is not None
    assert place(c, "more", "1Gi") is None
    # A failed binding gives its share back.
    c.scheduler.bind_failed("default/p-y")
    assert place(c, "again", "30Gi") is not None
    # Above the policy's max, or a capacity the device does not publish: never.
    c2 = cluster()
    assert place(c2, "huge", "90Gi") is None
    bad = dra.claim("bad", dra.request(count=1, device_class=SHARED_CLASS))
    bad["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"bandwidth": "1"}}
    c2.claim(bad)
    assert c2.schedule(pod_with("p-bad", "bad")).decision is None


def test_a_device_that_is_not_shared_is_given_whole_and_only_if_it_has_what_is_asked() -> None:
    c = DraCluster(("a",), gpus=2)  # plain GPUs of 80Gi
    assert place(c, "fits", "40Gi", dra.GPU_CLASS) == [("gpu-0", "", ())]
    assert place(c, "too-much", "100Gi", dra.GPU_CLASS) is None
    assert place(c, "other", "80Gi", dra.GPU_CLASS) == [("gpu-1", "", ())]


def test_after_a_restart_the_shares_are_read_from_the_claims() -> None:
    c = cluster()
    share = {
        "request": "gpus",
        "driver": dra.DRIVER,
        "pool": "a",
        "device": "gpu-0",
        "shareID": "5d1c0e4a-3a9b-4f0e-8a51-0b2f3c4d5e6f",
        "consumedCapacity": {"memory": "60Gi"},
    }
    written = dra.claim("old", dra.request(count=1, device_class=SHARED_CLASS), reserved_for=["someone"])
    written["status"]["allocation"] = {"devices": {"results": [share]}}
    c.claim(written)
    assert not c.store.taken()  # a share does not take the device
    assert place(c, "y", "30Gi") is None
    assert place(c, "z", "20Gi") is not None


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 80), st.booleans()), min_size=1, max_size=24))
def test_a_stream_of_claims_never_takes_more_than_the_devices_have(stream: list[tuple[int, bool]]) -> None:
    c = cluster(gpus=2)
    placed: list[str] = []
    for i, (gi, leave) in enumerate(stream):
        got = place(c, f"c{i}", f"{gi}Gi")
        if got is not None:
            placed.append(f"default/p-c{i}")
        if leave and placed:
            c.scheduler.bind_failed(placed.pop(0))
        for device, consumed in c.store.consumed().items():
            assert all(amount <= 80 * GI * 1000 for amount in consumed.values()), (device, consumed)


def test_a_gangs_members_share_a_device_inside_the_what_if_never_beyond_it() -> None:
    c = cluster(plugins=("fit", "gpu", "dra", "gang"))
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 3}})
    for i in range(3):
        c.claim(memory_claim(f"m-{i}", "30Gi"))
    members = [c.pod(pod_with(f"m-{i}", f"m-{i}")) for i in range(3)]
    # Three shares of 30Gi do not fit in 80Gi: all or nothing, and nothing is left taken.
    assert not gang.place_gang(c.scheduler, group, members).status.ok
    assert not c.store.consumed() and not c.cache.snapshot().device_picks
    small = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
    result = gang.place_gang(c.scheduler, small, members[:2])
    assert result.status.ok, result.status.message
    shares = [d for decision in result.decisions for cl in decision.claims for d in cl.devices]
    assert [d.device for d in shares] == ["gpu-0", "gpu-0"] and all(d.share_id for d in shares)
