"""Persistent volumes in a cluster: the watches that feed the cache's volume store, and the PreBind that makes
the scheduler's volume choices real before a pod is bound (kube-scheduler's VolumeBinding PreBind).

Watches: PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes are listed and watched by
:class:`scheduler.k8s.feeds.informer.Informer` (:func:`informers`); :class:`VolumeWatches` parses what they deliver into
the cache's :class:`scheduler.cache.volume_store.VolumeStore` and tells the operator, which wakes the pods waiting for
a volume. Until all four kinds are listed, a pod with claims is retried after a backoff rather than told that its
claim does not exist. An object that cannot be read is reported (an Event) and left out.

PreBind (:class:`VolumeBinder`), for a decision with volume choices, before the pod's binding is posted:

- a static volume: its ``spec.claimRef`` is set to the claim (with the claim's uid, and the volume's
  resourceVersion as a precondition); the PV controller of kube-controller-manager completes the bind (it sets
  the claim's ``spec.volumeName`` and both phases);
- provisioning: the claim is annotated ``volume.kubernetes.io/selected-node: <node>``; the claim's provisioner
  creates a volume there and the PV controller binds it;
- then every claim of the decision must show ``Bound`` (to the chosen volume) within
  :attr:`VolumeBindingSettings.timeout_s`, as the watch reports it. If not, or if a write is refused, the
  binding fails with the reason: the binder reports it (a ``FailedBinding`` Event), the cache releases the
  choices and the pod is tried again after a backoff.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s_client

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.volumes import ClaimBinding
from scheduler.cache.volume_store import VolumeStore
from scheduler.framework.interface import Decision
from scheduler.k8s.client import Client
from scheduler.k8s.feeds import informer
from scheduler.k8s.feeds.informer import Informer

log = structlog.get_logger(__name__)

KINDS = ("persistentvolumeclaims", "persistentvolumes", "storageclasses", "csinodes")
#: Annotations kube-scheduler's binder sets on a volume it binds and on the claim (the PV controller reads them).
ANNOTATION_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
#: Attempts at writing a volume's claimRef when its resourceVersion moved meanwhile.
WRITE_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class VolumeBindingSettings:
    #: Seconds a pod's claims may take to show Bound after the scheduler asked for it (kube-scheduler's
    #: ``bindTimeoutSeconds`` is 600); then the binding fails with an Event and the pod is tried again.
    timeout_s: float = 120.0


class VolumeWatches(informer.StoreWatches[VolumeStore, Callable[[], None]]):
    """Feeds the volume store from the watches (the ``on_event`` of the four informers); until all four are listed,
    pods with claims wait (see the module notes)."""

    kinds = KINDS

    def __init__(
        self,
        store: VolumeStore,
        *,
        on_change: Callable[[], None],
        invalid: Callable[[str, str, InvalidObject], None],
    ) -> None:
        super().__init__(store, on_change=on_change, invalid=invalid)
        s = store
        Kind = informer.StoredKind
        self._claims = Kind(
            "persistentvolumeclaim", True, api_volumes.parse_claim, s.upsert_claim, s.remove_claim, s.claims
        )
        self._volumes = Kind(
            "persistentvolume", False, api_volumes.parse_volume, s.upsert_volume, s.remove_volume, s.volumes
        )
        self._classes = Kind(
            "storageclass", False, api_volumes.parse_storage_class, s.upsert_class, s.remove_class, s.classes
        )
        self._csi_nodes = Kind(
            "csinode", False, api_volumes.parse_csi_node, s.upsert_csi_node, s.remove_csi_node, s.csi_nodes
        )
        self.claim_event = self.events(self._claims)
        self.volume_event = self.events(self._volumes)
        self.class_event = self.events(self._classes)
        self.csi_node_event = self.events(self._csi_nodes)
        #: Set (and replaced) at every change of a claim: what PreBind waits on.
        self._claims_moved = asyncio.Event()

    def all_listed(self) -> None:
        log.info(
            "volumes listed",
            claims=len(self.store.claims),
            volumes=len(self.store.volumes),
            classes=len(self.store.classes),
            csinodes=len(self.store.csi_nodes),
        )
        self._on_change()

    def fed(self, kind: informer.StoredKind, key: str, changed: bool, error: InvalidObject | None) -> None:
        if changed:
            if kind is self._claims:
                self._claims_moved.set()
                self._claims_moved = asyncio.Event()
            if self.store.listed:
                self._on_change()

    async def claims_moved(self, timeout: float) -> None:
        """Return when a claim changes next, or after ``timeout`` seconds."""
        event = self._claims_moved
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                await event.wait()
        except TimeoutError:
            return


def informers(client: Client, watches: VolumeWatches) -> dict[str, Informer]:
    """The list-then-watch loops of the four kinds, feeding ``watches``."""
    storage = k8s_client.StorageV1Api(client.api)
    return watches.informers(
        client,
        {
            "persistentvolumeclaims": (client.core.list_persistent_volume_claim_for_all_namespaces, watches._claims),
            "persistentvolumes": (client.core.list_persistent_volume, watches._volumes),
            "storageclasses": (storage.list_storage_class, watches._classes),
            "csinodes": (storage.list_csi_node, watches._csi_nodes),
        },
    )


class VolumeBinder:
    """kube-scheduler's volume PreBind, for :class:`scheduler.k8s.ports.binder.Binder` (see the module notes)."""

    def __init__(
        self,
        client: Client,
        watches: VolumeWatches,
        *,
        settings: VolumeBindingSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.watches = watches
        self.settings = settings or VolumeBindingSettings()
        self.clock = clock

    async def prebind(self, decision: Decision) -> str:
        """Make the decision's volume choices real and wait for its claims to be bound: "" when they are, else
        why not (the binding of the pod then fails with that reason)."""
        for binding in decision.volumes:
            problem = await (self._claim_volume(binding) if binding.volume else self._select_node(binding))
            if problem:
                return problem
        return await self._wait_bound(decision.volumes)

    async def _claim_volume(self, binding: ClaimBinding) -> str:
        """Set the volume's claimRef to the claim (unless it names it already)."""
        namespace, _, name = binding.claim.partition("/")
        claim = await self.client.call(
            self.client.core.read_namespaced_persistent_volume_claim, name=name, namespace=namespace
        )
        if not claim.ok:
            return f"reading persistentvolumeclaim {binding.claim}: {claim.message}"
        uid = str(_map(claim.body.get("metadata")).get("uid") or "")
        for _ in range(WRITE_ATTEMPTS):
            answer = await self.client.call(self.client.core.read_persistent_volume, name=binding.volume)
            if not answer.ok:
                return f"reading persistentvolume {binding.volume}: {answer.message}"
            meta = _map(answer.body.get("metadata"))
            ref = _map(_map(answer.body.get("spec")).get("claimRef"))
            if ref:
                if ref.get("namespace") == namespace and ref.get("name") == name and ref.get("uid") in (None, "", uid):
                    return ""  # named already (an earlier attempt of ours, or pre-bound)
                return (
                    f"persistentvolume {binding.volume} was taken by persistentvolumeclaim "
                    f"{ref.get('namespace')}/{ref.get('name')} meanwhile"
                )
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "annotations": {ANNOTATION_BOUND_BY_CONTROLLER: "yes"},
                },
                "spec": {
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": namespace,
                        "name": name,
                        "uid": uid,
                        "resourceVersion": str(_map(claim.body.get("metadata")).get("resourceVersion") or ""),
                    }
                },
            }
            written = await self.client.patch(self.client.core.patch_persistent_volume, name=binding.volume, body=patch)
            if written.ok:
                log.info("volume claimed", volume=binding.volume, claim=binding.claim, node=binding.node)
                return ""
            if written.status != 409:
                return f"setting persistentvolume {binding.volume} claimRef to {binding.claim}: {written.message}"
        return f"persistentvolume {binding.volume} kept changing while its claimRef was set"

    async def _select_node(self, binding: ClaimBinding) -> str:
        """Ask the claim's provisioner for a volume on the node."""
        namespace, _, name = binding.claim.partition("/")
        patch = {"metadata": {"annotations": {api_volumes.ANNOTATION_SELECTED_NODE: binding.node}}}
        answer = await self.client.patch(
            self.client.core.patch_namespaced_persistent_volume_claim, name=name, namespace=namespace, body=patch
        )
        if not answer.ok:
            return f"annotating persistentvolumeclaim {binding.claim} with its selected node: {answer.message}"
        log.info("volume provisioning asked", claim=binding.claim, node=binding.node)
        return ""

    async def _wait_bound(self, bindings: Iterable[ClaimBinding]) -> str:
        waiting = list(bindings)
        deadline = self.clock() + self.settings.timeout_s
        while True:
            claims = self.watches.store.claims
            still: list[ClaimBinding] = []
            for binding in waiting:
                claim = claims.get(binding.claim)
                if claim is None:
                    return f"persistentvolumeclaim {binding.claim} was deleted while its volume was being bound"
                if claim.phase == "Bound" and claim.volume_name:
                    if binding.volume and claim.volume_name != binding.volume:
                        return (
                            f"persistentvolumeclaim {binding.claim} was bound to {claim.volume_name}, "
                            f"not to the chosen {binding.volume}"
                        )
                    continue
                still.append(binding)
            if not still:
                return ""
            left = deadline - self.clock()
            if left <= 0:
                first = still[0]
                claim = claims.get(first.claim)
                phase = claim.phase if claim is not None else "unknown"
                what = f"volume {first.volume}" if first.volume else f"provisioning on {first.node}"
                return (
                    f"persistentvolumeclaim {first.claim} is not Bound after {self.settings.timeout_s:g}s "
                    f"({what}; phase {phase})"
                )
            waiting = still
            await self.watches.claims_moved(left)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
