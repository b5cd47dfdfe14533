"""NUMA zones in a cluster: the NodeResourceTopology objects (``topology.node.k8s.io/v1alpha2``, published per node by
NFD's topology-updater or the resource-topology-exporter) watched into the cache's zone store
(``scheduler.cache.numa_store``), for the ``numa`` filter.

The CRD is not Kubernetes' own: where the cluster does not serve it (no agent installed), nothing is watched and no
node has a NUMA rule (``scheduler.k8s.feeds.discovery``: asked once at start, one log line); where it does, the cache is
not ready before their first listing. An object that cannot be read is reported (an Event naming the field) and its
node is left without a NUMA rule until it can be. Every change of a node's zones wakes the pods that wait for room
(as a node update does): its agent publishes what the kubelet freed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import numa as api_numa
from scheduler.cache.numa_store import NumaStore
from scheduler.k8s.client import Client
from scheduler.k8s.feeds import informer
from scheduler.k8s.feeds.informer import Informer

KINDS = (api_numa.PLURAL,)


class ZoneWatches(informer.StoreWatches[NumaStore, Callable[[str | None], None]]):
    """Feeds the zone store from the NodeResourceTopology informer; ``on_change`` is told the node whose zones changed
    (None: any node's, once all are listed)."""

    kinds = KINDS

    def __init__(
        self,
        store: NumaStore,
        *,
        on_change: Callable[[str | None], None],
        invalid: Callable[[str, str, InvalidObject], None],
    ) -> None:
        super().__init__(store, on_change=on_change, invalid=invalid)
        self.kind = informer.StoredKind(
            "noderesourcetopology",
            False,
            api_numa.parse_node_resource_topology,
            self._upsert,
            self._remove,
            store.nodes,
        )
        self.event = self.events(self.kind)
        # No rule anywhere until a process that will watch says so (:meth:`expect`): an operator fed by hand (the
        # unit tests) has no zones to wait for.
        store.listed = True

    def expect(self) -> None:
        """A listing will come, or discovery will say the API is not served (:func:`switch_off`): until then the
        cache is not ready (``scheduler.k8s.feeds.feed``), so that no pod is placed blind to the zones."""
        self.store.listed = False

    def _upsert(self, zones: api_numa.NodeZones) -> bool:
        changed = self.store.published(zones.node) != zones
        self.store.upsert(zones)  # even unchanged: a newer publication shows the pods that ran before it
        return changed

    def _remove(self, node: str) -> bool:
        if node not in self.store.nodes:
            return False
        self.store.remove(node)
        return True

    def fed(self, kind: informer.StoredKind, key: str, changed: bool, error: InvalidObject | None) -> None:
        if changed and self.store.listed:
            self._on_change(key)

    def all_listed(self) -> None:
        self._on_change(None)


def switch_off(watches: ZoneWatches) -> None:
    """The cluster does not serve the API (``scheduler.k8s.feeds.discovery``, which logs why): no node has zones, and
    readiness waits for no listing of them."""
    watches.store.listed = True
    watches.all_listed()


def informers(client: Client, watches: ZoneWatches) -> dict[str, Informer]:
    """The list-then-watch loop of NodeResourceTopology objects, feeding ``watches``."""
    method = functools.partial(
        client.custom.list_cluster_custom_object, api_numa.GROUP, api_numa.VERSION, api_numa.PLURAL
    )
    return watches.informers(client, {api_numa.PLURAL: (method, watches.kind)})
