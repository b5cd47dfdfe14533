"""NodeResourceTopology objects from the watch into the zone store: a change wakes waiting pods, an unreadable object
is reported with its field and leaves its node without a NUMA rule, a deleted one too."""

from __future__ import annotations

from scheduler.api.basics.errors import InvalidObject
from scheduler.cache.numa_store import NumaStore
from scheduler.k8s.feeds import numa_zones
from scheduler.k8s.ports import events
from tests.api.test_numa import nrt


def test_objects_feed_the_store_and_changes_wake_the_waiting_pods() -> None:
    store = NumaStore()
    woken: list[str] = []
    problems: list[tuple[str, str, InvalidObject]] = []
    watches = numa_zones.ZoneWatches(
        store, on_change=lambda node: woken.append(node or "all"), invalid=lambda *problem: problems.append(problem)
    )
    assert store.listed  # nothing to wait for until a process that watches expects a listing
    watches.expect()
    assert not store.listed  # until the informer has listed them all
    watches.event(nrt("gpu-0", attributes=[{"name": "topologyManagerPolicy", "value": "single-numa-node"}]))
    watches.part_listed(numa_zones.KINDS[0])
    assert store.listed and store.nodes["gpu-0"].enforced and woken == ["all"]
    same = nrt("gpu-0", attributes=[{"name": "topologyManagerPolicy", "value": "single-numa-node"}])
    watches.event(same)
    assert woken == ["all"]  # published again unchanged: nothing to wake
    watches.event(nrt("gpu-0", attributes=[{"name": "topologyManagerPolicy", "value": "strict"}]))
    assert "gpu-0" not in store.nodes and woken == ["all", "gpu-0"]
    assert problems and problems[0][2].field == "attributes[topologyManagerPolicy]"
    watches.event(nrt("gpu-1"))
    watches.event({"metadata": {"name": "gpu-1"}}, deleted=True)
    assert "gpu-1" not in store.nodes


def test_an_unreadable_object_can_be_told_in_an_event() -> None:
    # The feed reports an unreadable object as an Event on it: the object must be one an Event can name.
    ref = events.parse_object("noderesourcetopology gpu-0")
    assert (ref.api_version, ref.kind, ref.namespace) == ("topology.node.k8s.io/v1alpha2", "NodeResourceTopology", "")


def test_a_cluster_without_the_api_has_nothing_to_wait_for() -> None:
    # Discovery says the CRD is not served: no listing will come, so pods the kubelet would align must not wait for one.
    store = NumaStore()
    woken: list[str] = []
    watches = numa_zones.ZoneWatches(store, on_change=lambda node: woken.append(node or "all"), invalid=print)
    watches.expect()
    numa_zones.switch_off(watches)
    assert store.listed and not store.nodes and woken == ["all"]
