"""Dynamic Resource Allocation in a cluster: the watches that feed the cache's device store, the pods' GPU counts
from their claims, and the PreBind that writes the scheduler's allocations into the ResourceClaims before a pod is
bound (kube-scheduler's DynamicResources PreBind), with its undo when the binding fails.

Watches: DeviceClasses, ResourceSlices and ResourceClaims (``resource.k8s.io/v1``) are listed and watched by
:class:`scheduler.k8s.feeds.informer.Informer` (:func:`informers`); :class:`DeviceWatches` parses what they deliver into
the cache's :class:`scheduler.cache.device_store.DeviceStore` and tells the operator, which wakes the pods waiting for a
device, gives nodes their DRA GPUs and re-reads the GPU count of the pending pods whose claims changed. Until the
three kinds are listed, a pod with claims is retried after a backoff. On a cluster that does not serve the API
(before Kubernetes 1.34) nothing is watched (:func:`switch_off`, ``scheduler.k8s.feeds.discovery``) and such a pod
waits,
told why. An object that cannot be read (a broken CEL expression, a bad quantity) is reported (an Event naming the
field) and left out.

PreBind (:class:`ClaimWriter`), for a decision with claims, before the pod's binding is posted, per claim:

1. the claim as the store has it (the watch, or our own last write; read from the API server only when that is
   stale): if it is allocated already (by an earlier attempt of ours, or shared) the allocation must be the
   decision's (or the decision only reserves it); else the finalizer ``resource.kubernetes.io/delete-protection``
   is added by a merge patch (an allocated claim is not deleted under a running pod; the resourceclaim controller
   removes it when it deallocates);
2. ``status.allocation`` and the pod in ``status.reservedFor`` are written by a merge patch of the status; each patch
   carries the claim's resourceVersion, a precondition (a conflict reads the claim again, up to
   :data:`WRITE_ATTEMPTS` times). Two writes and the binding per pod, as kube-scheduler;
3. the claim as written goes into the store at once, so no later decision sees its devices free while the watch
   catches up.

The claim for a pod's extended resources backed by DRA (``scheduler.api.devices.extended_resources``), as kube-scheduler
writes it: created first (``<pod>-extended-resources-<random>``, owned by the pod, annotated), then allocated and
reserved as above, then named in the pod's ``status.extendedResourceClaimStatus`` with its request mappings (the
kubelet reads the devices of each container from there). A decision that reuses such a claim writes the pod's status
again.

When the binding then fails (the pod is gone, refused, taken by someone else), :meth:`ClaimWriter.undo` takes the pod
out of ``reservedFor`` and, for a claim this decision allocated that nobody else uses, clears the allocation; the
claim made for the pod's extended resources is deleted (its finalizer taken off first), as kube-scheduler's Unreserve
does. A pod deleted later is released by kube-controller-manager's resourceclaim controller (it drops the pod from
``reservedFor``, deallocates a claim nobody uses, and deletes the claims made from a pod's templates; the garbage
collector deletes the extended resource claim with its pod).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s_client

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import consumable_capacity as api_capacity
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import extended_resources as api_extended
from scheduler.api.devices.dra import ClaimAllocation
from scheduler.cache.device_store import DeviceStore
from scheduler.framework.interface import Decision
from scheduler.k8s.client import Answer, Client
from scheduler.k8s.feeds import informer
from scheduler.k8s.feeds.informer import Informer

log = structlog.get_logger(__name__)

KINDS = ("deviceclasses", "resourceslices", "resourceclaims")
FINALIZER = "resource.kubernetes.io/delete-protection"
WRITE_ATTEMPTS = 4


class DeviceWatches(informer.StoreWatches[DeviceStore, Callable[[set[str]], None]]):
    """Feeds the device store from the watches (the ``on_event`` of the three informers)."""

    kinds = KINDS

    def __init__(
        self,
        store: DeviceStore,
        *,
        on_change: Callable[[set[str]], None],
        on_claims: Callable[[set[str]], None],
        invalid: Callable[[str, str, InvalidObject], None],
    ) -> None:
        """``on_change(claims)``: classes or slices changed (or everything was listed), and ``claims``;
        ``on_claims(claims)``: those claims changed, nothing else."""
        super().__init__(store, on_change=on_change, invalid=invalid)
        self._on_claims = on_claims
        s = store
        Kind = informer.StoredKind
        self._classes = Kind(
            "deviceclass", False, api_dra.parse_device_class, s.upsert_class, s.remove_class, s.classes
        )
        self._slices = Kind(
            "resourceslice", False, api_dra.parse_resource_slice, s.upsert_slice, s.remove_slice, s.slices
        )
        self._claims = Kind("resourceclaim", True, api_dra.parse_claim, s.upsert_claim, s.remove_claim, s.claims)
        self.class_event = self.events(self._classes)
        self.slice_event = self.events(self._slices)
        self.claim_event = self.events(self._claims)

    def all_listed(self) -> None:
        log.info(
            "devices listed",
            classes=len(self.store.classes),
            slices=len(self.store.slices),
            claims=len(self.store.claims),
        )
        self._on_change(set(self.store.claims))

    def fed(self, kind: informer.StoredKind, key: str, changed: bool, error: InvalidObject | None) -> None:
        # The pods that need an object that cannot be read say why (the dra plugin reads this).
        where = f"{kind.word} {key}"
        if error is not None:
            why = f"{error.field}: {error.reason}" if error.field else error.reason
            changed = self.store.unreadable.get(where) != why or changed
            self.store.unreadable[where] = why
        else:
            changed = self.store.unreadable.pop(where, None) is not None or changed
        if changed and self.store.listed:
            # A claim changes its own pods' GPU count; a class may change every pod's (whether it selects GPUs).
            if kind is self._claims:
                self._on_claims({key})
            else:
                self._on_change(set(self.store.claims) if kind is self._classes else set())


def switch_off(watches: DeviceWatches, *, why: str) -> None:
    """The cluster does not serve the API (``scheduler.k8s.feeds.discovery``): nothing watches the kinds, and a pod with
    claims waits, told ``why``, instead of being placed without its devices."""
    watches.store.unavailable = why


def informers(client: Client, watches: DeviceWatches) -> dict[str, Informer]:
    """The list-then-watch loops of the three kinds, feeding ``watches``."""
    resource = k8s_client.ResourceV1Api(client.api)
    return watches.informers(
        client,
        {
            "deviceclasses": (resource.list_device_class, watches._classes),
            "resourceslices": (resource.list_resource_slice, watches._slices),
            "resourceclaims": (resource.list_resource_claim_for_all_namespaces, watches._claims),
        },
    )


class ClaimWriter:
    """The DRA PreBind and its undo, for :class:`scheduler.k8s.ports.binder.Binder` (see the module notes)."""

    def __init__(self, client: Client, store: DeviceStore, *, on_change: Callable[[set[str]], None]) -> None:
        self.client = client
        self.store = store
        #: Told of a claim written or read here, as the watches tell of one (pending pods' GPU counts follow it).
        self._on_change = on_change
        self.api = k8s_client.ResourceV1Api(client.api)

    async def prebind(self, decision: Decision) -> str:
        """Write the decision's allocations and reservations: "" when done, else why not."""
        for claim in decision.claims:
            temporary = claim.claim
            problem = ""
            if temporary == api_dra.extended_claim_key(decision.pod.namespace, decision.pod.name):
                claim, problem = await self._create(decision, claim)
            problem = problem or await self._write(decision, claim)
            if not problem and claim.extended is not None:
                self.store.written_as(temporary)
                problem = await self._name_in_pod(decision, claim.claim, claim.extended)
            if problem:
                await self.undo(decision)
                return problem
        return ""

    async def _create(self, decision: Decision, claim: ClaimAllocation) -> tuple[ClaimAllocation, str]:
        """Create the claim for the pod's extended resources; the decision's allocation goes to it under its name."""
        pod = decision.pod
        assert claim.extended is not None
        body = api_extended.claim_body(pod.namespace, pod.name, pod.uid, claim.extended)
        answer = await self.client.call(self.api.create_namespaced_resource_claim, namespace=pod.namespace, body=body)
        if not answer.ok:
            return claim, f"creating the claim for the extended resources of pod {pod.key}: {answer.message}"
        self._seen(answer.body)
        name = str(_map(answer.body.get("metadata")).get("name") or "")
        log.info("extended resource claim created", claim=f"{pod.namespace}/{name}", pod=pod.key)
        return ClaimAllocation(f"{pod.namespace}/{name}", claim.allocation, claim.extended), ""

    async def _name_in_pod(self, decision: Decision, key: str, extended: api_extended.ExtendedClaim) -> str:
        """``status.extendedResourceClaimStatus``: the claim and the containers' request mappings."""
        pod = decision.pod
        patch = api_extended.pod_status_patch(_split(key)[1], extended)
        patch["metadata"] = {"uid": pod.uid}  # a precondition: the pod the decision was made for
        answer = await self.client.patch(
            self.client.core.patch_namespaced_pod_status, name=pod.name, namespace=pod.namespace, body=patch
        )
        if not answer.ok:
            return f"writing the extended resource claim into the status of pod {pod.key}: {answer.message}"
        return ""

    async def _write(self, decision: Decision, claim: ClaimAllocation) -> str:
        pod = decision.pod
        namespace, _, name = claim.claim.partition("/")
        # The claim as the store has it (the watch, or our own last write): its resourceVersion is the precondition
        # of each patch, so a claim that moved meanwhile is read again (409) rather than overwritten.
        current = self.store.claims.get(claim.claim)
        for _ in range(WRITE_ATTEMPTS):
            if current is None:
                current = await self._read(namespace, name)
                if current is None:
                    return f"reading resourceclaim {claim.claim}: not found"
            written = current.allocation
            reserved = list(current.reserved_for)
            if any(r.uid == pod.uid for r in reserved) and written is not None:
                return ""  # an earlier attempt of ours
            if written is not None and claim.allocation is not None and not _same_devices(written, claim.allocation):
                return f"resourceclaim {claim.claim} was allocated by someone else meanwhile"
            if written is None and claim.allocation is None:
                return f"resourceclaim {claim.claim} is no longer allocated"
            if len(reserved) >= api_dra.RESERVED_FOR_MAX:
                return f"resourceclaim {claim.claim} is reserved for {len(reserved)} pods already"
            version = current.resource_version
            if written is None and FINALIZER not in current.finalizers:
                patch = {"metadata": {"resourceVersion": version, "finalizers": [*current.finalizers, FINALIZER]}}
                answer = await self._patch(self.api.patch_namespaced_resource_claim, namespace, name, patch)
                if answer.status == 409:
                    current = None
                    continue
                if not answer.ok:
                    return f"adding the finalizer to resourceclaim {claim.claim}: {answer.message}"
                version = str(_map(answer.body.get("metadata")).get("resourceVersion") or "")
            status: dict[str, Any] = {
                "reservedFor": [
                    *({"resource": r.resource, "name": r.name, "uid": r.uid} for r in reserved),
                    {"resource": "pods", "name": pod.name, "uid": pod.uid},
                ]
            }
            if written is None:
                assert claim.allocation is not None
                status["allocation"] = _allocation_body(claim.allocation)
            patch = {"metadata": {"resourceVersion": version}, "status": status}
            answer = await self._patch(self.api.patch_namespaced_resource_claim_status, namespace, name, patch)
            if answer.status == 409:
                current = None
                continue
            if not answer.ok:
                return f"writing the allocation of resourceclaim {claim.claim}: {answer.message}"
            self._seen(answer.body)
            log.info(
                "claim allocated" if written is None else "claim reserved",
                claim=claim.claim,
                pod=pod.key,
                node=decision.node,
                devices=[d.device for d in claim.devices],
            )
            return ""
        return f"resourceclaim {claim.claim} kept changing while it was being allocated"

    async def _read(self, namespace: str, name: str) -> api_dra.ResourceClaim | None:
        answer = await self.client.call(self.api.read_namespaced_resource_claim, name=name, namespace=namespace)
        if not answer.ok:
            return None
        self._seen(answer.body)
        return self.store.claims.get(f"{namespace}/{name}")

    async def _patch(self, method: Any, namespace: str, name: str, body: Mapping[str, Any]) -> Answer:
        return await self.client.patch(method, name=name, namespace=namespace, body=body)

    async def undo(self, decision: Decision) -> None:
        """The pod was not bound: take it out of its claims' ``reservedFor``; clear what this decision allocated
        that nobody else uses (best effort: the resourceclaim controller cleans up after a deleted pod too)."""
        pod = decision.pod
        for claim in decision.claims:
            if claim.extended is not None:
                await self._delete_extended(pod.uid)
                continue
            namespace, _, name = claim.claim.partition("/")
            for _ in range(WRITE_ATTEMPTS):
                answer = await self.client.call(self.api.read_namespaced_resource_claim, name=name, namespace=namespace)
                if not answer.ok:
                    break
                body = dict(answer.body)
                status = dict(_map(body.get("status")))
                reserved = [dict(_map(r)) for r in status.get("reservedFor") or []]
                kept = [r for r in reserved if r.get("uid") != pod.uid]
                if len(kept) == len(reserved):
                    break
                status["reservedFor"] = kept or None
                ours = claim.allocation is not None and _same(status.get("allocation"), claim.allocation)
                if not kept and ours:
                    status["allocation"] = None
                body["status"] = status
                written = await self.client.call(
                    self.api.replace_namespaced_resource_claim_status, name=name, namespace=namespace, body=body
                )
                if written.status == 409:
                    continue
                if written.ok:
                    self._seen(written.body)
                    log.info("claim released", claim=claim.claim, pod=pod.key, deallocated=not kept and ours)
                else:
                    log.warning("releasing a claim failed", claim=claim.claim, pod=pod.key, reason=written.message)
                break

    async def _delete_extended(self, pod_uid: str) -> None:
        """Delete the claim made for the pod's extended resources, its finalizer taken off first (best effort)."""
        made = self.store.extended_claim(pod_uid)
        if made is None:
            return
        namespace, name = made.namespace, made.name
        if FINALIZER in made.finalizers:
            kept = [f for f in made.finalizers if f != FINALIZER]
            patch = {"metadata": {"finalizers": kept or None}}
            await self._patch(self.api.patch_namespaced_resource_claim, namespace, name, patch)
        answer = await self.client.call(self.api.delete_namespaced_resource_claim, name=name, namespace=namespace)
        if answer.ok or answer.status == 404:
            if self.store.remove_claim(made.key):
                self._on_change({made.key})
            log.info("extended resource claim deleted", claim=made.key)
        else:
            log.warning("deleting an extended resource claim failed", claim=made.key, reason=answer.message)

    def _seen(self, body: Mapping[str, Any]) -> None:
        try:
            claim = api_dra.parse_claim(body)
        except InvalidObject as exc:
            log.warning("a claim as written cannot be read back", reason=str(exc))
            return
        if self.store.upsert_claim(claim):
            self._on_change({claim.key})


def _allocation_body(allocation: api_dra.Allocation) -> dict[str, Any]:
    body: dict[str, Any] = {
        "devices": {
            "results": [
                {
                    "request": d.request,
                    "driver": d.driver,
                    "pool": d.pool,
                    "device": d.device,
                    **({"adminAccess": True} if d.admin_access else {}),
                    **(_share(d) if d.share_id else {}),
                }
                for d in allocation.devices
            ]
        }
    }
    if allocation.node:
        body["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [allocation.node]}]}
            ]
        }
    return body


def _share(device: api_dra.AllocatedDevice) -> dict[str, Any]:
    """A share of a device that allows multiple allocations: a UUID of its own (the allocator's is a placeholder)
    and what it consumes, named as the driver publishes the capacity."""
    share = str(uuid.uuid4()) if device.share_id == api_capacity.NEW_SHARE else device.share_id
    consumed = {name.removeprefix(f"{device.driver}/"): _quantity(amount) for name, amount in device.consumed}
    return {"shareID": share, "consumedCapacity": consumed}


def _quantity(milli: int) -> str:
    """A quantity as the API server would write it back: binary suffixes where whole (30Gi), else plain."""
    if milli % 1000:
        return f"{milli}m"
    units = milli // 1000
    for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if units and units % (1 << power) == 0:
            return f"{units >> power}{suffix}"
    return str(units)


def _same_devices(written: api_dra.Allocation, allocation: api_dra.Allocation) -> bool:
    return {d.key for d in written.devices} == {d.key for d in allocation.devices}


def _same(written: object, allocation: api_dra.Allocation) -> bool:
    results = _map(_map(written).get("devices")).get("results") or []
    keys = {(_map(r).get("driver"), _map(r).get("pool"), _map(r).get("device")) for r in results}
    return keys == {d.key for d in allocation.devices}


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
