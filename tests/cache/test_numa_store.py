"""The scheduler's own count of NUMA zones while the published NodeResourceTopology lags behind the pods it placed."""

from __future__ import annotations

from scheduler.api.devices import numa
from scheduler.api.objects import pod as api_pod
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
