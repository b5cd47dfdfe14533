"""The cluster's persistent volumes as the scheduler knows them: claims, volumes, storage classes, CSINodes, the
pods held that use each claim, and the volume choices the scheduler made and has not seen through yet.

Every input enters through the ``upsert_*`` / ``remove_*`` methods (the operator's watches); the cache calls
:meth:`VolumeStore.pod_added` / :meth:`pod_removed` for the pods it holds (bound and assumed) that use claims, and
:meth:`assume` / :meth:`release` for its decisions (kube-scheduler's assume cache of volume binding).

Invariants: a static volume is chosen for at most one claim at a time: once assumed for a claim it is not
offered to another until the decision fails (:meth:`release`) or the watch shows the volume taken (its
``claimRef`` set, which is what the decision asked for). A claim assumed to a volume, or to provisioning on a
node, is read as bound there by every later decision, so two pods sharing an unbound claim go to the same node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.pod import PodRequest
from scheduler.api.objects.volumes import Claim, ClaimBinding, CsiNode, StorageClass, Volume
from scheduler.cache import tables


class VolumeStore:
    def __init__(self) -> None:
        self.claims: dict[str, Claim] = {}
        self.volumes: dict[str, Volume] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, CsiNode] = {}
        #: Whether the kinds above have been listed (the operator's watches); until then a pod with claims waits,
        #: rather than being told its claim does not exist. True where nothing watches (the simulator, tests).
        self.listed = True
        #: claim key -> {pod key: node slot} of the pods held (bound or assumed) that use it.
        self.users: dict[str, dict[str, int]] = {}
        #: pod key -> the choices assumed for its claims, until its binding completes or fails.
        self._assumed: dict[str, tuple[ClaimBinding, ...]] = {}
        #: claim key -> the choice assumed for it; volume name -> the claim key it was assumed for.
        self.assumed_claims: dict[str, ClaimBinding] = {}
        self.assumed_volumes: dict[str, str] = {}
        #: Grows at every change (what the plugin memoises on).
        self.version = 0
        self._by_class: tuple[int, dict[str, list[Volume]]] = (-1, {})

    # --- the watches -----------------------------------------------------------------------------------------

    def upsert_claim(self, claim: Claim) -> bool:
        """Take a claim's new state; False when nothing the scheduler reads changed."""
        if not tables.put(self.claims, claim.key, claim):
            return False
        if claim.bound or claim.selected_node:
            # The decision is seen through (or someone else decided): the claim speaks for itself now.
            self._drop_claim(claim.key)
        return self._changed()

    def remove_claim(self, key: str) -> bool:
        if not tables.drop(self.claims, key):
            return False
        self._drop_claim(key)
        return self._changed()

    def upsert_volume(self, volume: Volume) -> bool:
        if not tables.put(self.volumes, volume.name, volume):
            return False
        if volume.claim_ref is not None:
            claim = self.assumed_volumes.get(volume.name)
            if claim is not None:
                self._drop_claim(claim)
        return self._changed()

    def remove_volume(self, name: str) -> bool:
        return tables.drop(self.volumes, name) and self._changed()

    def upsert_class(self, storage_class: StorageClass) -> bool:
        return tables.put(self.classes, storage_class.name, storage_class) and self._changed()

    def remove_class(self, name: str) -> bool:
        return tables.drop(self.classes, name) and self._changed()

    def upsert_csi_node(self, node: CsiNode) -> bool:
        return tables.put(self.csi_nodes, node.name, node) and self._changed()

    def remove_csi_node(self, name: str) -> bool:
        return tables.drop(self.csi_nodes, name) and self._changed()

    def _changed(self) -> bool:
        """Count a change (the version the plugin memoises on); True, for the methods that return whether one was."""
        self.version += 1
        return True

    # --- the pods held -----------------------------------------------------------------------------------------

    def pod_added(self, pod: PodRequest, slot: int) -> None:
        for claim in pod.volumes:
            self.users.setdefault(api_volumes.claim_key(pod.namespace, claim), {})[pod.key] = slot
        self.version += 1

    def pod_removed(self, pod: PodRequest) -> None:
        for claim in pod.volumes:
            key = api_volumes.claim_key(pod.namespace, claim)
            users = self.users.get(key)
            if users is not None:
                users.pop(pod.key, None)
                if not users:
                    del self.users[key]
        self.version += 1

    # --- the scheduler's choices -------------------------------------------------------------------------------

    def assume(self, pod_key: str, bindings: Sequence[ClaimBinding]) -> None:
        """The scheduler chose these for ``pod_key``'s claims: hold them until :meth:`release` or the watch."""
        self.release(pod_key)
        if not bindings:
            return
        self._assumed[pod_key] = tuple(bindings)
        for binding in bindings:
            self.assumed_claims[binding.claim] = binding
            if binding.volume:
                self.assumed_volumes[binding.volume] = binding.claim
        self.version += 1

    def release(self, pod_key: str) -> None:
        """The pod's binding failed, or the pod is gone: its choices are free again."""
        bindings = self._assumed.pop(pod_key, ())
        for binding in bindings:
            if self.assumed_claims.get(binding.claim) == binding:
                del self.assumed_claims[binding.claim]
            if binding.volume and self.assumed_volumes.get(binding.volume) == binding.claim:
                del self.assumed_volumes[binding.volume]
        if bindings:
            self.version += 1

    def assumed(self, pod_key: str) -> tuple[ClaimBinding, ...]:
        return self._assumed.get(pod_key, ())

    def _drop_claim(self, claim_key: str) -> None:
        binding = self.assumed_claims.pop(claim_key, None)
        if binding is None:
            return
        if binding.volume and self.assumed_volumes.get(binding.volume) == claim_key:
            del self.assumed_volumes[binding.volume]
        for pod_key, bindings in list(self._assumed.items()):
            kept = tuple(b for b in bindings if b.claim != claim_key)
            if kept:
                self._assumed[pod_key] = kept
            else:
                del self._assumed[pod_key]

    # --- reading -----------------------------------------------------------------------------------------------

    def volumes_of_class(self, name: str) -> list[Volume]:
        """The volumes of a class, smallest first (ties by name: the same choice after a restart)."""
        version, by_class = self._by_class
        if version != self.version:
            by_class = {}
            for volume in sorted(self.volumes.values(), key=lambda v: (v.capacity, v.name)):
                by_class.setdefault(volume.storage_class, []).append(volume)
            self._by_class = (self.version, by_class)
        return by_class.get(name, [])

    def limits(self) -> Mapping[str, CsiNode]:
        return self.csi_nodes
