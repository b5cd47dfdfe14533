"""Partitionable devices (dynamic MIG as NVIDIA's DRA driver publishes it): a full GPU and its MIG placements share
one counter set, and no allocation ever takes more of a counter than the set has, whatever order claims come and
go in, inside a gang's what-if too; among the placements that fit, the one that keeps the most room is taken."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.devices import dra as api_dra
from scheduler.core import gang
from tests.api import dra_objects as dra
from tests.plugins.test_dra import DraCluster, pod_with


def mig_cluster(nodes: tuple[str, ...] = ("a",), gpus: int = 1) -> DraCluster:
    cluster = DraCluster(nodes, plugins=("fit", "gpu", "dra", "gang"), gpus=0)
    cluster.store.upsert_class(api_dra.parse_device_class(dra.mig_class()))
    for node in nodes:
        for raw in dra.mig_slices(node, gpus):
            cluster.slice(raw)
    return cluster


def place(cluster: DraCluster, name: str, *requests: dict[str, object]) -> list[str] | None:
    cluster.claim(dra.claim(name, *requests))
    result = cluster.schedule(pod_with(f"p-{name}", name))
    if result.decision is None:
        return None
    return [d.device for c in result.decision.claims for d in c.devices]


def over_consumed(cluster: DraCluster) -> list[str]:
    """Every counter of every set that the devices taken consume more of than the set has."""
    used: Counter[tuple[str, str]] = Counter()
    for key in cluster.store.taken():
        device = cluster.store.device(key)
        assert device is not None
        for set_name, counters in device.consumes:
            for name, amount in counters:
                used[(f"{device.pool}/{set_name}", name)] += amount
    limits = {
        (f"{s.pool}/{set_name}", name): amount
        for s in cluster.store.slices.values()
        for set_name, counters in s.counter_sets
        for name, amount in counters
    }
    return [
        f"{where} {name}: {amount} > {limits[(where, name)]}"
        for (where, name), amount in used.items()
        if amount > limits[(where, name)]
    ]


def test_a_full_gpu_and_its_partitions_are_never_handed_out_together() -> None:
    cluster = mig_cluster()
    assert place(cluster, "whole", dra.request(count=1)) == ["gpu-0"]
    assert place(cluster, "small", dra.mig_request("1g.10gb")) is None
    cluster.scheduler.bind_failed("default/p-whole")
    assert place(cluster, "small2", dra.mig_request("1g.10gb")) is not None
    assert place(cluster, "whole2", dra.request(count=1)) is None
    assert not over_consumed(cluster)


def test_overlapping_placements_are_never_handed_out_together() -> None:
    cluster = mig_cluster()
    assert place(cluster, "a", dra.mig_request("4g.40gb")) == ["gpu-0-mig-4g-40gb-0"]
    # The 4g holds memory slices 0-3 and 4 of the 7 compute slices: a 3g fits only at slices 4-7, then nothing.
    assert place(cluster, "b", dra.mig_request("3g.40gb")) == ["gpu-0-mig-3g-40gb-4"]
    assert place(cluster, "c", dra.mig_request("1g.10gb")) is None
    assert not over_consumed(cluster)


def test_a_small_partition_keeps_room_for_the_large_ones() -> None:
    cluster = mig_cluster()
    # First fit would put the 1g at memory slice 0, where it rules out the 4g and one of the two 3g placements.
    (small,) = place(cluster, "small", dra.mig_request("1g.10gb")) or [""]
    assert small == "gpu-0-mig-1g-10gb-6"
    assert place(cluster, "big", dra.mig_request("4g.40gb")) == ["gpu-0-mig-4g-40gb-0"]
    assert not over_consumed(cluster)


def test_a_partition_goes_to_the_gpu_already_partitioned() -> None:
    cluster = mig_cluster(gpus=2)
    assert place(cluster, "one", dra.mig_request("2g.20gb")) is not None
    second = place(cluster, "two", dra.mig_request("2g.20gb"))
    assert second is not None and second[0].startswith("gpu-0-")  # gpu-1 stays whole for a full-GPU claim
    assert place(cluster, "whole", dra.request(count=1)) == ["gpu-1"]


def test_a_gangs_what_if_counts_the_counters_its_members_take() -> None:
    cluster = mig_cluster()
    for i in range(2):
        cluster.claim(dra.claim(f"g-{i}", dra.mig_request("4g.40gb")))
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
    members = [cluster.pod(pod_with(f"m-{i}", f"g-{i}")) for i in range(2)]
    result = gang.place_gang(cluster.scheduler, group, members)
    assert not result.status.ok  # one 4g placement per GPU
    assert not cluster.store.taken() and not cluster.cache.snapshot().device_picks


@settings(max_examples=40, deadline=None)
@given(
    stream=st.lists(st.tuples(st.sampled_from([*dra.MIG_PROFILES, "gpu"]), st.booleans()), min_size=1, max_size=30),
)
def test_no_counter_is_ever_over_consumed_as_claims_come_and_go(stream: list[tuple[str, bool]]) -> None:
    cluster = mig_cluster(("a", "b"), gpus=2)
    placed: list[str] = []
    for i, (profile, leave) in enumerate(stream):
        request = dra.request(count=1) if profile == "gpu" else dra.mig_request(profile)
        if place(cluster, f"c{i}", request) is not None:
            placed.append(f"default/p-c{i}")
        if leave and placed:
            cluster.scheduler.bind_failed(placed.pop(0))
        assert not over_consumed(cluster)


def test_a_late_watch_event_of_a_claim_just_written_does_not_free_its_partition() -> None:
    # The allocation is written, and the store takes the claim as the API server answered (resourceVersion 3). The
    # claim's watch then delivers an older version, from before the write (3 is not there yet: the finalizer added
    # at 2). Taken as it came, it showed the claim unallocated until the watch caught up, and a pod decided in that
    # moment was given the same MIG placement: two claims allocated one memory slice, eight compute slices of seven
    # in the API server (benchmarks/mig_stream.py's churn stream, at 10 arrivals a second).
    cluster = mig_cluster()
    cluster.claim(dra.claim("a", dra.mig_request("1g.10gb")))
    result = cluster.schedule(pod_with("p-a", "a"))
    assert result.decision is not None
    (decided,) = [d.device for c in result.decision.claims for d in c.devices]
    written = dra.claim("a", dra.mig_request("1g.10gb"), allocation=dra.allocation("a", decided, request_name="mig"))
    written["metadata"]["resourceVersion"] = "3"
    cluster.claim(written)
    before_write = dra.claim("a", dra.mig_request("1g.10gb"))
    before_write["metadata"]["resourceVersion"] = "2"
    cluster.claim(before_write)
    assert decided not in (place(cluster, "b", dra.mig_request("1g.10gb")) or [])
    assert not over_consumed(cluster)
