"""Extended resources backed by DRA (KEP 5004; DeviceClass ``spec.extendedResourceName``, beta and on by default in
Kubernetes 1.36): a pod asking ``nvidia.com/gpu: 2`` (or the implicit ``deviceclass.resource.kubernetes.io/<class>``)
on a node where no device plugin serves the resource gets its devices through a ResourceClaim the scheduler makes
for it, as kube-scheduler's DynamicResources plugin does.

Pure types and rules, no I/O: which resource names may be backed by DRA (:func:`is_extended`), what each container
asks (:func:`parse_container_asks`, read with the pod), and the claim's requests with the pod's request mappings
(:func:`requests_and_mappings`), named and ordered as kube-scheduler names them (``container-<i>-request-<j>``:
``i`` the container's index in ``initContainers`` then ``containers``, ``j`` the resource's index among the
container's request names in sorted order). Init containers that are not sidecars run one after the other and
before the others: each reuses the devices of the long-lived containers that come after it, and all of them share
the largest extra request among them.

The claim (:func:`claim_body`) is named ``<pod>-extended-resources-<random>`` by the API server, owned by the pod
(the garbage collector deletes it with the pod), and carries :data:`CLAIM_ANNOTATION`; the pod's
``status.extendedResourceClaimStatus`` names it and maps each container's resource to its request
(:func:`pod_status_patch`), which is how the kubelet finds the devices for the container.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.api.basics import resources
from scheduler.api.devices import dra as api_dra

#: The implicit extended resource name of every DeviceClass: this prefix and the class name.
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
CLAIM_ANNOTATION = api_dra.EXTENDED_CLAIM_ANNOTATION


@functools.lru_cache(maxsize=4096)  # asked of every resource of every pod read; names repeat by the thousand
def is_extended(name: str) -> bool:
    """An extended resource name (a domain, not Kubernetes' own, and not a quota's ``requests.`` prefix), or a
    class's implicit name: only those may be backed by DRA (kube-scheduler's ``IsDRAExtendedResourceName``)."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    domain, slash, _ = name.partition("/")
    if not slash or name.startswith("requests."):
        return False
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    """The extended resources one container asks for."""

    #: Its index in ``initContainers`` followed by ``containers``.
    index: int
    name: str
    #: An init container that is not a sidecar: it runs before the others and ends.
    short_lived: bool
    #: Extended resource -> whole units (requests, defaulted from limits).
    amounts: tuple[tuple[str, int], ...]
    #: The names of all its requests (cpu, memory...), sorted: a resource's place among them names its request.
    names: tuple[str, ...]

    def amount(self, resource: str) -> int:
        return next((n for r, n in self.amounts if r == resource), 0)


def parse_container_asks(
    spec: Mapping[str, object],
    *,
    obj: str,
    read: tuple[Sequence[resources.ContainerRequests], Sequence[resources.ContainerRequests]] | None = None,
) -> tuple[ContainerAsk, ...]:
    """Per container that asks for any extended resource, what it asks (containers that ask none are left out);
    ``read``: the spec's (init containers, containers) as :func:`scheduler.api.basics.resources.read_containers` read
    them, when the pod's parse has read them already."""
    init, regular = read if read is not None else resources.read_containers(spec, obj=obj)
    out: list[ContainerAsk] = []
    for index, read_one in enumerate((*init, *regular)):
        requests = read_one.requests
        amounts = tuple(sorted((n, a) for n, a in requests.items() if a > 0 and is_extended(n)))
        if amounts:
            container = read_one.container
            short = index < len(init) and container.get("restartPolicy") != "Always"
            out.append(ContainerAsk(index, str(container.get("name") or ""), short, amounts, tuple(sorted(requests))))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """An entry of ``status.extendedResourceClaimStatus.requestMappings``."""

    container: str
    resource: str
    request: str


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The claim for a pod's extended resources on one node: its requests (``ExactCount`` of the resource's class)
    and how the pod's containers map to them."""

    requests: tuple[api_dra.Request, ...]
    mappings: tuple[RequestMapping, ...]


def _container_request(
    ask: ContainerAsk, resource: str, device_class: str, reusable: Sequence[api_dra.Request | None]
) -> tuple[api_dra.Request | None, list[RequestMapping]]:
    """The request ``ask``'s container needs for ``resource`` beyond the ``reusable`` requests (of long-lived
    containers after it), and its mappings."""
    wanted = ask.amount(resource)
    if wanted <= 0:
        return None, []
    mappings: list[RequestMapping] = []
    have = 0
    for request in reusable:
        if request is None:
            continue
        have += request.choices[0].count
        mappings.append(RequestMapping(ask.name, resource, request.name))
        if have >= wanted:
            return None, mappings
    name = f"container-{ask.index}-request-{ask.names.index(resource)}"
    request = api_dra.Request(name, (api_dra.Choice(name, device_class, count=wanted - have),))
    mappings.append(RequestMapping(ask.name, resource, name))
    return request, mappings


def requests_and_mappings(asks: Sequence[ContainerAsk], classes: Mapping[str, str]) -> ExtendedClaim:
    """The claim for the extended resources ``classes`` names (resource -> DeviceClass), as kube-scheduler's
    ``createRequestsAndMappings`` builds it: requests sorted by name, mappings resource by resource (long-lived
    containers first, then the init containers)."""
    requests: list[api_dra.Request] = []
    mappings: list[RequestMapping] = []
    slots = (max((a.index for a in asks), default=-1)) + 1
    for resource in sorted(classes):
        device_class = classes[resource]
        long_lived: list[api_dra.Request | None] = [None] * slots
        long_maps: list[RequestMapping] = []
        for ask in asks:
            if not ask.short_lived:
                request, maps = _container_request(ask, resource, device_class, ())
                long_lived[ask.index] = request
                long_maps.extend(maps)
        largest: api_dra.Request | None = None
        short_names: set[str] = set()
        short_maps: list[RequestMapping] = []
        for ask in asks:
            if ask.short_lived:
                request, maps = _container_request(ask, resource, device_class, long_lived[ask.index :])
                if request is not None:
                    short_names.add(request.name)
                    if largest is None or largest.choices[0].count < request.choices[0].count:
                        largest = request
                short_maps.extend(maps)
        if largest is not None and len(short_names) > 1:
            # The init containers run one at a time: they all use the largest one's devices.
            short_names.discard(largest.name)
            short_maps = [
                RequestMapping(m.container, m.resource, largest.name) if m.request in short_names else m
                for m in short_maps
            ]
        if largest is not None:
            requests.append(largest)
        requests.extend(r for r in long_lived if r is not None)
        mappings.extend(long_maps)
        mappings.extend(short_maps)
    return ExtendedClaim(tuple(sorted(requests, key=lambda r: r.name)), tuple(mappings))


def claim_for(
    namespace: str, pod_name: str, pod_uid: str, asks: Sequence[ContainerAsk], classes: Mapping[str, str]
) -> tuple[api_dra.ResourceClaim, ExtendedClaim]:
    """The claim to allocate for the pod's extended resources ``classes`` names, under its temporary key
    (:func:`scheduler.api.devices.dra.extended_claim_key`), and its requests and mappings."""
    wanted = requests_and_mappings(asks, classes)
    name = api_dra.extended_claim_key(namespace, pod_name).partition("/")[2]
    return api_dra.ResourceClaim(namespace, name, pod_uid, wanted.requests, extended=True), wanted


def reused(made: api_dra.ResourceClaim, asks: Sequence[ContainerAsk], classes: Mapping[str, str]) -> ExtendedClaim:
    """A claim made for the pod by an earlier decision, used again (a binding that failed after the claim was
    written, a restart between the two): its requests, and the pod's mappings to them."""
    names = {r.name for r in made.requests}
    wanted = requests_and_mappings(asks, classes)
    return ExtendedClaim(made.requests, tuple(m for m in wanted.mappings if m.request in names))


def claim_body(namespace: str, pod_name: str, pod_uid: str, claim: ExtendedClaim) -> dict[str, Any]:
    """The ResourceClaim to create for a pod's extended resources (its name generated by the API server)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": namespace,
            "generateName": f"{pod_name}-extended-resources-",
            "annotations": {CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "controller": True}
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.name,
                        "exactly": {
                            "deviceClassName": r.choices[0].device_class,
                            "allocationMode": api_dra.EXACT_COUNT,
                            "count": r.choices[0].count,
                        },
                    }
                    for r in claim.requests
                ]
            }
        },
    }


def pod_status_patch(claim_name: str, claim: ExtendedClaim) -> dict[str, Any]:
    """The merge patch of the pod's status that names its extended resource claim."""
    return {
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": claim_name,
                "requestMappings": [
                    {"containerName": m.container, "resourceName": m.resource, "requestName": m.request}
                    for m in claim.mappings
                ],
            }
        }
    }
