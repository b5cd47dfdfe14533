"""The scheduler's own count of NUMA zones while the published NodeResourceTopology lags behind the pods it placed."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.api.devices import numa
from scheduler.api.objects import pod as api_pod
from scheduler.cache import numa_store
from scheduler.cache.numa_store import NumaStore
from tests.api import objects

GPU = "nvidia.com/gpu"


def zones(free: list[int], *, node: str = "gpu-0") -> numa.NodeZones:
    return numa.NodeZones(
        node,
        numa.Policy.SINGLE_NUMA_NODE,
        numa.Scope.CONTAINER,
        tuple(numa.Zone(f"node-{i}", i, {GPU: 4}, {GPU: 4}, {GPU: f}) for i, f in enumerate(free)),
    )


def test_a_placed_pod_counts_in_its_zone_until_an_update_after_it_runs_shows_it() -> None:
    store = NumaStore()
    store.upsert(zones([4, 4]), now=0.0)
    store.placed("ml/a", "gpu-0", [{GPU: 3}, {}])
    assert store.available("gpu-0") == [{GPU: 1}, {GPU: 4}]  # the object still says 4: our own count says 1
    store.upsert(zones([4, 4]), now=5.0)  # published before the pod ran: it cannot show it
    assert store.available("gpu-0") == [{GPU: 1}, {GPU: 4}]
    store.running("ml/a", since=10.0)
    store.upsert(zones([1, 4]), now=70.0)  # the agent's next round shows the pod
    assert store.available("gpu-0") == [{GPU: 1}, {GPU: 4}] and store.predicted("ml/a") is None


def test_a_pod_that_leaves_before_the_object_shows_it_is_no_longer_counted() -> None:
    store = NumaStore()
    store.upsert(zones([4, 4]), now=0.0)
    store.placed("ml/a", "gpu-0", [{GPU: 3}, {}])
    store.gone("ml/a")
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 4}]


def test_nodes_without_zones_have_no_count_and_a_removed_object_drops_its_pods() -> None:
    store = NumaStore()
    store.placed("ml/a", "cpu-0", [{GPU: 1}])
    assert store.available("cpu-0") is None and store.predicted("ml/a") is None
    store.upsert(zones([4, 4]), now=0.0)
    store.placed("ml/b", "gpu-0", [{}, {GPU: 2}])
    store.remove("gpu-0")
    assert store.available("gpu-0") is None and store.predicted("ml/b") is None


def test_the_count_never_goes_below_zero() -> None:
    store = NumaStore()
    store.upsert(zones([1, 4]), now=0.0)
    store.placed("ml/a", "gpu-0", [{GPU: 3}, {}])  # the object already shows part of it
    assert store.available("gpu-0") == [{GPU: 0}, {GPU: 4}]


def test_the_pods_an_object_shows_are_placed_in_the_zones_that_show_them_used() -> None:
    store = NumaStore()
    store.upsert(zones([1, 0]), now=0.0)  # 3 GPUs used in zone 0, 4 in zone 1
    pods = [api_pod.parse_pod(objects.pod(name, gpus=gpus)) for name, gpus in (("a", 2), ("b", 3), ("c", 2))]
    # In order: a fits zone 0's 3 used, b only zone 1's 4; c finds 1 and 1 left, and is credited nothing (a victim
    # search must not count on room it cannot place).
    assert store.shown("gpu-0", pods) == {"default/a": ({GPU: 2}, {}), "default/b": ({}, {GPU: 3})}
    assert store.shown("cpu-0", pods) == {}


def test_a_pod_the_object_shows_gives_its_zone_back_when_it_leaves_until_an_update_shows_it() -> None:
    store = NumaStore(clock=lambda: 100.0)
    store.upsert(zones([4, 0]), now=0.0)  # zone 1 full: a and b, each of 2 GPUs, shown already
    a, b = (api_pod.parse_pod(objects.pod(name, gpus=2)) for name in ("a", "b"))
    store.pod_left(a, "gpu-0", [a, b])
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 2}]  # the kubelet admits the next pod there already
    store.upsert(zones([4, 0]), now=90.0)  # published before it left: still shows it
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 2}]
    store.upsert(zones([4, 2]), now=160.0)
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 2}]  # counted once


def test_each_change_of_a_node_shows_in_the_next_read_of_it() -> None:
    # The figures are counted once and kept until the node changes: every read after a change sees it.
    store = NumaStore()
    store.upsert(zones([4, 4]), now=0.0)
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 4}]
    store.placed("ml/a", "gpu-0", [{GPU: 3}, {}])
    assert store.available("gpu-0") == [{GPU: 1}, {GPU: 4}]
    store.placed("ml/b", "gpu-0", [{}, {GPU: 2}])
    assert store.free("gpu-0") == ({GPU: 1}, {GPU: 2})
    store.gone("ml/a")
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 2}]
    store.labelled("gpu-0", numa.Policy.RESTRICTED)
    store.upsert(zones([3, 4]), now=1.0)  # shows neither pod yet (ml/b does not run)
    assert store.available("gpu-0") == [{GPU: 3}, {GPU: 2}]
    # What a caller does with its copy is its own.
    copy = store.available("gpu-0")
    assert copy is not None
    copy[0][GPU] = 0
    assert store.available("gpu-0") == [{GPU: 3}, {GPU: 2}]
    store.remove("gpu-0")
    assert store.available("gpu-0") is None and store.free("gpu-0") is None


def _running(name: str, gpus: int) -> api_pod.PodRequest:
    return api_pod.parse_pod(objects.pod(name, gpus=gpus, node_name="gpu-0", phase="Running", namespace="ml"))


@pytest.mark.parametrize("first", ["zones", "pods"])
def test_pods_found_before_the_zones_count_as_pods_found_after_them(first: str) -> None:
    # After a restart the pods and the objects are listed apart: whichever comes first, the pods already running
    # are counted until the node's next update (the object may show them already: on the safe side).
    a = _running("a", 1)
    on_node: list[api_pod.PodRequest] = []
    store = NumaStore(clock=lambda: 10.0, pods_on=lambda node: on_node if node == "gpu-0" else ())
    if first == "zones":
        store.upsert(zones([3, 4]), now=5.0)
        on_node.append(a)
        store.pod_placed(a, "gpu-0")
    else:
        on_node.append(a)
        store.upsert(zones([3, 4]), now=5.0)
    assert store.available("gpu-0") == [{GPU: 2}, {GPU: 4}]
    store.upsert(zones([3, 4]), now=20.0)  # the agent's next round: it shows a
    assert store.available("gpu-0") == [{GPU: 3}, {GPU: 4}]


@pytest.mark.parametrize("first", ["zones", "pods"])
def test_an_object_whose_fingerprint_shows_the_pods_running_there_is_read_as_it_is(first: str) -> None:
    # The agent fingerprints the pods its figures show: the running pods that match it are not counted again,
    # whichever of the pods and the object came first, though the object is never published again (kwok).
    a, b = _running("a", 1), _running("b", 2)
    shows = numa_store.pods_fingerprint([("ml", "a"), ("ml", "b")])
    published = dataclasses.replace(zones([3, 2]), pods_fingerprint=shows)
    on_node: list[api_pod.PodRequest] = []
    store = NumaStore(clock=lambda: 10.0, pods_on=lambda node: on_node if node == "gpu-0" else ())
    if first == "pods":
        on_node += [a, b]
    store.upsert(published, now=5.0)
    if first == "zones":
        on_node.append(a)
        store.pod_placed(a, "gpu-0")
        assert store.predicted("ml/a") is not None  # a alone is not the object's set: counted still
        on_node.append(b)
        store.pod_placed(b, "gpu-0")
    assert store.predicted("ml/a") is None and store.available("gpu-0") == [{GPU: 3}, {GPU: 2}]
    # A pod placed since is not in it: counted until an update shows it.
    c = api_pod.parse_pod(objects.pod("c", gpus=2, node_name="gpu-0", namespace="ml"))
    on_node.append(c)
    store.pod_placed(c, "gpu-0")
    assert store.available("gpu-0") == [{GPU: 1}, {GPU: 2}]


def test_a_pod_that_left_is_given_back_until_the_pods_left_have_the_objects_fingerprint() -> None:
    a, b = _running("a", 2), _running("b", 2)
    on_node = [a, b]
    store = NumaStore(clock=lambda: 100.0, pods_on=lambda node: on_node)
    both = numa_store.pods_fingerprint([("ml", "a"), ("ml", "b")])
    store.upsert(dataclasses.replace(zones([4, 0]), pods_fingerprint=both), now=0.0)  # a and b fill zone 1
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 0}]
    store.pod_left(a, "gpu-0", [a, b])
    on_node.remove(a)
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 2}]
    # Published after a left (the clock is not to be trusted: the same instant): its fingerprint says so.
    only_b = numa_store.pods_fingerprint([("ml", "b")])
    store.upsert(dataclasses.replace(zones([4, 2]), pods_fingerprint=only_b), now=100.0 - 1e-9)
    assert store.available("gpu-0") == [{GPU: 4}, {GPU: 2}]  # counted once, not 4


def test_the_pods_fingerprint_is_the_agents() -> None:
    # The podfingerprint library's own compatibility vectors (its testdata, compat-tiny and compat-small).
    tiny = [("production", "jaeger-dpgjk"), ("production", "nginx-rt684"), ("production", "envoy-g9m22")]
    assert numa_store.pods_fingerprint(tiny) == "pfp0v001607b76a0e9d3aeb4"
    assert numa_store.pods_fingerprint(reversed(tiny)) == "pfp0v001607b76a0e9d3aeb4"  # a set: in any order
    small = [
        ("analytics", "controller-69dkj"),
        ("kube-public", "subscriber-tq6v7"),
        ("kube-public", "transformer-hfbng"),
        ("kube-public", "validator-c6pn5"),
        ("kube-system", "proxy-wszrd"),
        ("middleware", "processor-jkrl4"),
        ("network", "gateway-vsll5"),
        ("network", "importer-kzdfr"),
        ("network", "importer-q5vt9"),
        ("staging", "prometheus-bwgbn"),
    ]
    assert numa_store.pods_fingerprint(small) == "pfp0v001567144e4a561bb5a"
    # Its tracing_test.go's pods and signature (v0.2.2).
    pods = [("ns1", "n1"), ("ns1", "n2"), ("ns2", "n1"), ("ns3", "n1"), ("ns3", "n2")]
    assert numa_store.pods_fingerprint(pods) == "pfp0v001b92008c14168b3a6"
