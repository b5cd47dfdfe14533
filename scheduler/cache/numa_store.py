"""The nodes' NUMA zones as the scheduler knows them: what their NodeResourceTopology objects publish, and its own
count of the pods the objects do not show yet.

The agent that publishes a node's object (NFD's topology-updater, the resource-topology-exporter) reads what the
kubelet has allocated and writes it every 60 s by default, so a pod bound a moment ago is not in its zone's
``available`` yet; binding on those figures sends the next pod to the same full zone, and the kubelet refuses it
(scheduler-plugins' NodeResourceTopologyMatch in its default mode does exactly that). So the store keeps, for each
pod it placed or saw on a node with zones, the zones it predicted the pod takes (the Topology Manager replayed:
``scheduler.api.devices.topology_manager``), and counts them against the published figures until the object shows
them: until an update of the node's object arrives after the pod started running (the kubelet had admitted it and
allocated its resources, and the agent had read them). A pod that leaves before the object shows it is simply no
longer counted. A pod that leaves after (the object shows it, the store has no prediction of it) gives its zones
back at once (:meth:`pod_left`: the zones :meth:`shown` gives it), until an update published after it left shows
them free: once the pod is gone from the API server its kubelet has stopped it, and admits the next pod in its
zones, while the object can lag a minute behind. Counted used until then, a preemptor whose victims left found its
zone still full and evicted the pods of the other zone too.

After a restart the count is rebuilt from the pods on the nodes, whichever of the pods and the objects come first:
each pod is predicted again and counts until the node's next update (the object may already show the pods that ran
before it: counted twice for up to one round of the agent, on the safe side, never an over-commit). Where the agent
fingerprints the pods it accounts for (``nodeTopologyPodsFingerprint``, method ``all``), the store needs no guess:
when the pods running on the node (as the cache holds them, :attr:`NumaStore.pods_on`) have the object's fingerprint
(:func:`pods_fingerprint`), the object shows exactly them, so none of them is counted again and a pod that left is
shown gone (:meth:`NumaStore._check`). So a node whose object is never published again (no agent runs, as on kwok)
is still read right after a restart.

Every input enters through its methods: :meth:`NumaStore.upsert` / :meth:`remove` (the objects' watch), and for
the pods the cache holds (bound and assumed) :meth:`pod_placed`, :meth:`pod_running`, :meth:`pod_left`;
:meth:`available` answers what each zone of a node has left. A cluster without NodeResourceTopology objects pays one
test of an empty dict per pod.

A victim search (preemption, reclaim, consolidation) removes pods from a what-if and must know which zones each
gives back: a victim set that frees enough on the node may free nothing in any one zone, and evicting it helps no
pod the kubelet aligns. A pod the store counts gives back its predicted zones; a pod the object already shows has
no prediction left, so :meth:`shown` replays the Topology Manager for the node's such pods, fitting them into what
each zone shows used (a pod that fits nowhere there is credited nothing: a victim search never counts on room it
cannot place).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import xxhash

from scheduler.api.devices import topology_manager
from scheduler.api.devices.numa import NodeZones, Policy
from scheduler.api.objects.pod import PodRequest


@dataclass(slots=True)
class _Predicted:
    #: What the pod takes of each zone (by zone index).
    taken: tuple[Mapping[str, int], ...]
    #: When it was seen running (None: not yet): an update of the node's object after that shows it.
    running_since: float | None = None


def pods_fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of a set of pods, each (namespace, name), as the topology agents publish it in
    ``nodeTopologyPodsFingerprint`` (github.com/k8stopologyawareschedwg/podfingerprint, ``pfp0v001``): each pod's
    XXH64 of its name seeded with the XXH64 of its namespace, the hashes sorted, and the XXH64 of them (8 bytes each,
    little endian), in hexadecimal after the version."""
    hashes = sorted(
        xxhash.xxh64_intdigest(name.encode(), seed=xxhash.xxh64_intdigest(namespace.encode()))
        for namespace, name in pods
    )
    return "pfp0v001" + xxhash.xxh64_hexdigest(b"".join(h.to_bytes(8, "little") for h in hashes))


def _no_pods(node: str) -> Sequence[PodRequest]:
    return ()


class NumaStore:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        pods_on: Callable[[str], Sequence[PodRequest]] = _no_pods,
    ) -> None:
        self.clock = clock
        #: The pods the cache holds on a node (bound and assumed), by node name: read when a node's zones first come
        #: (its pods already there are predicted) and to match a published fingerprint.
        self.pods_on = pods_on
        #: Node name -> its zones as last published.
        self.nodes: dict[str, NodeZones] = {}
        #: Node name -> the policy its Koordinator label gives its pods (kept for zones that come later).
        self._labels: dict[str, Policy] = {}
        #: Node name -> pod key -> the zones predicted for the pod, while the node's object does not show it (by node:
        #: a node's figures are read once per node and cycle, and must not walk every other node's pods).
        self._predicted: dict[str, dict[str, _Predicted]] = {}
        #: Pod key -> the node of its prediction.
        self._node_of: dict[str, str] = {}
        #: Whether the objects have been listed (the operator's watch); True where nothing watches (the simulator).
        self.listed = True
        #: Node name -> pod key -> when a pod the object shows left, and what it gave back of each zone (counted free
        #: until an update published after that).
        self._left: dict[str, dict[str, tuple[float, tuple[Mapping[str, int], ...]]]] = {}
        #: Node name -> the zones and pod keys :meth:`shown` replayed last, and its answer (a victim search asks
        #: once per what-if and candidate node; the answer holds until the object or the node's pods change).
        self._shown: dict[str, tuple[NodeZones, tuple[str, ...], dict[str, tuple[Mapping[str, int], ...]]]] = {}
        #: Node name -> the zones :meth:`free` counted on, and its answer (a filter reads every node for each pod; the
        #: answer holds until the object, a prediction or a pod that left changes: each such change drops it).
        self._free: dict[str, tuple[NodeZones, tuple[Mapping[str, int], ...]]] = {}

    def labelled(self, node: str, policy: Policy | None) -> None:
        """Node ``node``'s Koordinator label gives its pods ``policy`` (None: it has no label, or is gone): kept with
        its zones (:attr:`NodeZones.label_policy`), whenever they come."""
        if policy is None:
            self._labels.pop(node, None)
        else:
            self._labels[node] = policy
        zones = self.nodes.get(node)
        if zones is not None and zones.label_policy != policy:
            self.nodes[node] = dataclasses.replace(zones, label_policy=policy)

    def published(self, node: str) -> NodeZones | None:
        """Node ``node``'s zones as its object publishes them (without its label's policy)."""
        zones = self.nodes.get(node)
        return None if zones is None else dataclasses.replace(zones, label_policy=None)

    def upsert(self, zones: NodeZones, *, now: float | None = None) -> None:
        """The node's object was published (created or updated) at ``now`` (default: the clock's now): pods running
        before that are in it."""
        now = self.clock() if now is None else now
        first = zones.node not in self.nodes
        self._free.pop(zones.node, None)
        self.nodes[zones.node] = dataclasses.replace(zones, label_policy=self._labels.get(zones.node))
        on_node = self._predicted.get(zones.node, {})
        for key, p in list(on_node.items()):
            if p.running_since is not None and p.running_since <= now:
                self.gone(key)
        left = self._left.get(zones.node)
        if left:
            for key, (since, _) in list(left.items()):
                if since <= now:
                    del left[key]
        if first:
            # The pods the cache found on the node before its zones: predicted as if placed now (the order of the
            # two listings after a restart must not matter), counted until the next update shows them.
            for pod in self.pods_on(zones.node):
                self._predict(pod, zones.node)
        self._check(zones.node)

    def remove(self, node: str) -> None:
        """The node's object is gone: the node has no NUMA rule any more (its kubelet's policy is not known)."""
        self.nodes.pop(node, None)
        self._shown.pop(node, None)
        self._free.pop(node, None)
        self._left.pop(node, None)
        for key in self._predicted.pop(node, {}):
            del self._node_of[key]

    def placed(self, pod_key: str, node: str, taken: Sequence[Mapping[str, int]]) -> None:
        """The scheduler placed (or found) pod ``pod_key`` on ``node``, taking ``taken`` of each zone."""
        if node in self.nodes and any(taken):
            self.gone(pod_key)
            self._predicted.setdefault(node, {})[pod_key] = _Predicted(tuple(dict(t) for t in taken))
            self._free.pop(node, None)
            self._node_of[pod_key] = node

    def pod_placed(self, pod: PodRequest, node: str) -> None:
        """The cache holds ``pod`` on ``node`` (assumed or bound): counted in the zones the kubelet gives it, as
        predicted on what the zones have left (bound and Running already: shown by the next update)."""
        if node in self.nodes:
            self._predict(pod, node)
            if pod.phase == "Running":
                self._check(node)

    def _predict(self, pod: PodRequest, node: str) -> None:
        admitted = topology_manager.admit_pod(self.nodes[node], pod, available=self.available(node))
        self.placed(pod.key, node, admitted.taken)
        if pod.phase == "Running":
            self.running(pod.key, since=self.clock())

    def _check(self, node: str, *, leaving: str = "") -> None:
        """If the pods running on ``node`` (those the cache holds there, but pod ``leaving``) have its object's
        fingerprint, the object shows exactly them: none is counted again, and the pods that left before it are shown
        gone. Nothing to do (and nothing read) where the object has no fingerprint or the store counts nothing."""
        zones = self.nodes.get(node)
        if zones is None or zones.pods_fingerprint is None or not (node in self._predicted or self._left.get(node)):
            return
        running = [p for p in self.pods_on(node) if p.phase == "Running" and p.key != leaving]
        if pods_fingerprint((p.namespace, p.name) for p in running) != zones.pods_fingerprint:
            return
        for pod in running:
            self.gone(pod.key)
        if self._left.pop(node, None):
            self._free.pop(node, None)

    def _prediction(self, pod_key: str) -> _Predicted | None:
        node = self._node_of.get(pod_key)
        return self._predicted[node][pod_key] if node is not None else None

    def running(self, pod_key: str, *, since: float) -> None:
        """Pod ``pod_key`` runs (the kubelet admitted it) since ``since``: the next update of its node shows it."""
        p = self._prediction(pod_key)
        if p is not None and p.running_since is None:
            p.running_since = since

    def pod_running(self, pod_key: str, node: str) -> None:
        """Pod ``pod_key`` on ``node`` runs: :meth:`running` since now, and the pods running there may now be the
        ones its object's fingerprint shows."""
        self.running(pod_key, since=self.clock())
        self._check(node)

    def gone(self, pod_key: str) -> None:
        """Pod ``pod_key`` left, or its binding failed: if the object did not show it yet, it never will."""
        node = self._node_of.pop(pod_key, None)
        if node is not None:
            self._free.pop(node, None)
            on_node = self._predicted[node]
            del on_node[pod_key]
            if not on_node:
                del self._predicted[node]

    def pod_left(self, pod: PodRequest, node: str, on_node: Sequence[PodRequest]) -> None:
        """``pod`` left ``node``, where the cache held ``on_node`` (``pod`` among them): a prediction is dropped
        (:meth:`gone`); a pod the object shows gives back the zones :meth:`shown` gives it, from now until an update
        published after now, or until the pods left running have the object's fingerprint (published after it left:
        the object shows it gone)."""
        if self.predicted(pod.key) is not None:
            self.gone(pod.key)
        elif node in self.nodes:
            taken = self.shown(node, [p for p in on_node if self.predicted(p.key) is None]).get(pod.key)
            if taken:
                self._left.setdefault(node, {})[pod.key] = (self.clock(), taken)
                self._free.pop(node, None)
        self._check(node, leaving=pod.key)

    def predicted(self, pod_key: str) -> tuple[Mapping[str, int], ...] | None:
        """What pod ``pod_key`` is counted as taking of each zone of its node, while the object does not show it."""
        p = self._prediction(pod_key)
        return p.taken if p is not None else None

    def available(self, node: str) -> list[dict[str, int]] | None:
        """What each zone of ``node`` has left: the published figures less the pods they do not show yet (never
        below zero); None for a node without zones."""
        free = self.free(node)
        return None if free is None else [dict(f) for f in free]

    def free(self, node: str) -> tuple[Mapping[str, int], ...] | None:
        """:meth:`available`, counted once until the node's figures change (read it, never change it)."""
        zones = self.nodes.get(node)
        if zones is None:
            return None
        memo = self._free.get(node)
        if memo is not None and memo[0] is zones:
            return memo[1]
        left = self._published(zones)
        for p in self._predicted.get(node, {}).values():
            for i, taken in enumerate(p.taken[: len(left)]):
                for name, amount in taken.items():
                    left[i][name] = max(0, left[i].get(name, 0) - amount)
        self._free[node] = (zones, tuple(left))
        return self._free[node][1]

    def shown(self, node: str, pods: Sequence[PodRequest]) -> dict[str, tuple[Mapping[str, int], ...]]:
        """What each of ``pods`` (pods on ``node`` that the store has no prediction for: the object shows them)
        takes of each zone, by pod key: the Topology Manager replayed for them in order on what each zone shows used
        (allocatable less available), so that they account for it zone by zone. A pod the used figures cannot hold
        is left out (it gives back nothing when a what-if removes it). Empty for a node without zones."""
        zones = self.nodes.get(node)
        if zones is None:
            return {}
        keys = tuple(p.key for p in pods)
        memo = self._shown.get(node)
        if memo is not None and memo[0] is zones and memo[1] == keys:
            return memo[2]
        used = [
            {name: max(0, amount - free.get(name, 0)) for name, amount in z.allocatable.items()}
            for z, free in zip(zones.zones, self._published(zones), strict=True)
        ]
        out: dict[str, tuple[Mapping[str, int], ...]] = {}
        for pod in pods:
            admitted = topology_manager.admit_pod(zones, pod, available=used)
            if not admitted.admitted or not any(admitted.taken):
                continue
            out[pod.key] = admitted.taken
            for zone, taken in zip(used, admitted.taken, strict=False):
                for name, amount in taken.items():
                    zone[name] = zone.get(name, 0) - amount
        self._shown[node] = (zones, keys, out)
        return out

    def _published(self, zones: NodeZones) -> list[dict[str, int]]:
        """What the object says each zone has left, plus what the pods that left since gave back (at most the zone's
        allocatable)."""
        free = [dict(z.available) for z in zones.zones]
        for _, gave in self._left.get(zones.node, {}).values():
            for zone, here, taken in zip(zones.zones, free, gave, strict=False):
                for name, amount in taken.items():
                    here[name] = min(zone.allocatable.get(name, 0), here.get(name, 0) + amount)
        return free
