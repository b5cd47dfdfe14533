"""The operator's DRA watches and the claims' PreBind on the fake API server: a pod's claim gets the finalizer, its
allocation and the pod in ``reservedFor`` before the pod is bound; a conflict is retried on the claim as it is
now; a refused binding takes the pod out of ``reservedFor`` and clears the allocation; nodes get the GPUs their
slices publish and pods the GPUs their claims ask for, in whatever order the watches deliver them; an unreadable
class is reported and left out. (The real API server and resourceclaim controller: tests/e2e/test_dra_e2e.py.)
"""

from __future__ import annotations

import copy
from typing import Any

from scheduler.k8s.operator import Operator
from scheduler.k8s.ports import device_claims
from tests.api import dra_objects as dra
from tests.k8s.fakeapi import Canned, FakeApiServer, eventually, status
from tests.k8s.test_operator import bound, events, flushed


def gpu_node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "status": {"allocatable": capacity}}


def dra_pod(name: str, claim: str, *, shared: bool = False) -> dict[str, Any]:
    """A pod whose claim was made from its template (or, ``shared``, names an existing claim)."""
    entry = (
        {"name": "gpus", "resourceClaimName": claim} if shared else {"name": "gpus", "resourceClaimTemplateName": "t"}
    )
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-11-22T09:00:00Z",
        },
        "spec": {
            "schedulerName": "gpusched",
            "resourceClaims": [entry],
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim}]},
    }


def setup(operator: Operator, fake: FakeApiServer, *claims: dict[str, Any]) -> None:
    operator.set_leading(True)
    operator.node_event(gpu_node("gpu-0"))
    operator.feed.devices.class_event(dra.gpu_class())
    operator.feed.devices.slice_event(dra.gpu_slice("gpu-0", 8))
    for raw in claims:
        stored = fake.store_resource_claim(copy.deepcopy(raw))
        operator.feed.devices.claim_event(stored)
    for kind in device_claims.KINDS:
        operator.feed.devices.part_listed(kind)


async def test_the_allocation_and_reservation_are_written_before_the_binding(
    fake: FakeApiServer, operator: Operator
) -> None:
    setup(operator, fake, dra.claim("p-gpus", dra.request(count=2), owner="p"))
    operator.pod_event(dra_pod("p", "p-gpus"))
    operator.listed()
    await eventually(lambda: "p" in bound(fake))
    writes = [(s.method, s.path.rsplit("/", 1)[-1], s.content_type) for s in fake.seen if "resourceclaims" in s.path]
    merge = "application/merge-patch+json"
    # The finalizer, then the status, each with the resourceVersion as a precondition; both before the binding,
    # and no read: the store's claim is current.
    assert writes == [("PATCH", "p-gpus", merge), ("PATCH", "status", merge)]
    assert [s.body["metadata"]["resourceVersion"] for s in fake.seen if "resourceclaims" in s.path] == ["1", "2"]
    assert fake.seen.index(fake.requests("PATCH", "/status")[0]) < fake.seen.index(fake.requests("POST", "/binding")[0])
    claim = fake.resource_claims[("default", "p-gpus")]
    assert claim["metadata"]["finalizers"] == [device_claims.FINALIZER]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [("gpus", "gpu-0"), ("gpus", "gpu-1")]
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-0"]}]}]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    binding = bound(fake)["p"]
    assert binding["metadata"]["annotations"]["gpusched.io/gpu-ids"] == "0,1"
    # Written through: the store has the allocation before the watch shows it.
    assert operator.cache.devices.claims["default/p-gpus"].allocation is not None
    assert operator.cache.devices.gpus("gpu-0")[0].name == "gpu-0" and operator.cache.nodes[0].info.gpus == 8


async def test_a_conflict_is_retried_on_the_claim_as_it_is_now(fake: FakeApiServer, operator: Operator) -> None:
    setup(operator, fake, dra.claim("p-gpus", dra.request(count=1), owner="p"))
    fake.claim_status_answers.append(Canned(409, status(409, "Conflict", "the object has been modified")))
    operator.pod_event(dra_pod("p", "p-gpus"))
    operator.listed()
    await eventually(lambda: "p" in bound(fake))
    assert len(fake.requests("PATCH", "/status")) == 2  # the conflict read the claim again, then wrote
    assert len(fake.requests("GET", "/resourceclaims/p-gpus")) == 1
    assert fake.resource_claims[("default", "p-gpus")]["status"]["reservedFor"][0]["uid"] == "uid-p"


async def test_a_refused_binding_releases_the_claim_and_the_pod_is_tried_again(
    fake: FakeApiServer, operator: Operator
) -> None:
    setup(operator, fake, dra.claim("p-gpus", dra.request(count=1), owner="p"))
    fake.bind_answers["p"] = Canned(403, status(403, "Forbidden", "a webhook said no"))
    operator.pod_event(dra_pod("p", "p-gpus"))
    operator.listed()
    await eventually(lambda: len(fake.requests("PUT", "/status")) >= 1)
    released = fake.requests("PUT", "/status")[0].body["status"]
    assert released.get("reservedFor") is None and released.get("allocation") is None
    await eventually(lambda: not operator.cache.devices.taken())
    del fake.bind_answers["p"]
    # After its backoff, allocated and bound again.
    await eventually(lambda: len(fake.requests("POST", "/pods/p/binding")) >= 2, timeout=10)
    assert fake.resource_claims[("default", "p-gpus")]["status"]["allocation"] is not None


async def test_a_claim_allocated_by_someone_else_meanwhile_fails_the_binding_then_is_joined(
    fake: FakeApiServer, operator: Operator
) -> None:
    setup(operator, fake, dra.claim("shared", dra.request(count=1)))
    taken = fake.resource_claims[("default", "shared")]
    taken["status"] = {
        "allocation": dra.allocation("gpu-0", "gpu-7"),
        "reservedFor": [{"resource": "pods", "name": "x", "uid": "uid-x"}],
    }
    fake.store_resource_claim(taken)  # a new resourceVersion: the watch has not shown it yet
    operator.pod_event(dra_pod("p", "shared", shared=True))
    operator.listed()
    await eventually(lambda: bool(events(fake, "FailedBinding")), timeout=10)
    await flushed(operator)
    assert "was allocated by someone else meanwhile" in events(fake, "FailedBinding")[0]["message"]
    # Tried again, the pod joins the claim as it is now: its second user, on its node, its devices unchanged.
    await eventually(lambda: "p" in bound(fake), timeout=10)
    claim = fake.resource_claims[("default", "shared")]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == ["uid-x", "uid-p"]
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-7"]


async def test_pods_get_their_gpus_from_claims_whatever_order_the_watches_deliver(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.pod_event(dra_pod("p", "p-gpus"))  # before its claim, its class, its node's slice and the node
    assert operator.pending["default/p"].gpu.count == 0
    for kind in device_claims.KINDS:
        operator.feed.devices.part_listed(kind)
    operator.feed.devices.claim_event(dra.claim("p-gpus", dra.request(count=4), owner="p"))
    operator.feed.devices.class_event(dra.gpu_class())
    operator.feed.devices.slice_event(dra.gpu_slice("gpu-0", 8))
    operator.node_event(gpu_node("gpu-0"))
    assert operator.cache.nodes[0].info.gpus == 8
    assert operator.pending["default/p"].gpu.count == 4


async def test_an_unreadable_class_is_reported_and_left_out(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.feed.devices.class_event(dra.gpu_class("broken", "device.driver =="))
    await eventually(lambda: bool(events(fake, "InvalidObject")))
    await flushed(operator)
    (event,) = events(fake, "InvalidObject")
    assert "deviceclass broken field spec.selectors[1].cel.expression" in event["message"]
    assert "broken" not in operator.cache.devices.classes


async def test_a_pod_whose_claim_cannot_be_read_says_why_and_goes_once_it_is_fixed(
    fake: FakeApiServer, operator: Operator
) -> None:
    setup(operator, fake)
    broken = dra.claim("p-gpus", dra.request(count=1), owner="p")
    broken["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": "device.driver =="}}]
    operator.feed.devices.claim_event(fake.store_resource_claim(copy.deepcopy(broken)))
    operator.pod_event(dra_pod("p", "p-gpus"))
    operator.listed()
    await eventually(lambda: bool(events(fake, "FailedScheduling")))
    await flushed(operator)
    message = events(fake, "FailedScheduling")[0]["message"]
    assert (
        'resourceclaim "p-gpus" cannot be read (spec.devices.requests[0].exactly.selectors[0].cel.expression' in message
    )
    assert any("resourceclaim default/p-gpus" in e["message"] for e in events(fake, "InvalidObject"))
    fixed = fake.store_resource_claim(copy.deepcopy(dra.claim("p-gpus", dra.request(count=1), owner="p")))
    operator.feed.devices.claim_event(fixed)
    await eventually(lambda: "p" in bound(fake), timeout=10)


def extended_pod(name: str, gpus: int) -> dict[str, Any]:
    """A pod asking ``nvidia.com/gpu`` (no claim), as for a device plugin."""
    pod = dra_pod(name, "")
    del pod["spec"]["resourceClaims"], pod["status"]["resourceClaimStatuses"]
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    return pod


def mapped_setup(operator: Operator, fake: FakeApiServer) -> None:
    setup(operator, fake)
    mapped = dra.gpu_class()
    mapped["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    operator.feed.devices.class_event(mapped)


async def test_an_extended_resource_claim_is_created_allocated_and_named_in_the_pod_before_the_binding(
    fake: FakeApiServer, operator: Operator
) -> None:
    mapped_setup(operator, fake)
    operator.pod_event(extended_pod("p", 2))
    assert operator.pending["default/p"].gpu.count == 2
    operator.listed()
    await eventually(lambda: "p" in bound(fake))
    order = [(s.method, s.path) for s in fake.seen if "resourceclaims" in s.path or "/pods/p/" in s.path]
    made = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-extended-resources-1"
    assert order == [
        ("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"),
        ("PATCH", made),  # the finalizer
        ("PATCH", made + "/status"),  # the allocation and the pod in reservedFor
        ("PATCH", "/api/v1/namespaces/default/pods/p/status"),  # extendedResourceClaimStatus
        ("POST", "/api/v1/namespaces/default/pods/p/binding"),
    ]
    created = fake.requests("POST", "/resourceclaims")[0].body
    assert created["metadata"]["generateName"] == "p-extended-resources-"
    assert created["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert created["metadata"]["ownerReferences"][0]["uid"] == "uid-p"
    assert created["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",
            "exactly": {"deviceClassName": dra.GPU_CLASS, "allocationMode": "ExactCount", "count": 2},
        }
    ]
    claim = fake.resource_claims[("default", "p-extended-resources-1")]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [("container-0-request-1", f"gpu-{i}") for i in (0, 1)]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    status_patch = fake.requests("PATCH", "/pods/p/status")[0].body
    assert status_patch["metadata"] == {"uid": "uid-p"}
    assert status_patch["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": "p-extended-resources-1",
        "requestMappings": [
            {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-1"}
        ],
    }
    assert bound(fake)["p"]["metadata"]["annotations"]["gpusched.io/gpu-ids"] == "0,1"
    # The devices are the written claim's now, not an assumed allocation under the temporary name.
    store = operator.cache.devices
    assert not store.assumed and set(store.taken().values()) == {"default/p-extended-resources-1"}


async def test_a_refused_binding_deletes_the_extended_resource_claim_and_the_pod_gets_a_new_one(
    fake: FakeApiServer, operator: Operator
) -> None:
    mapped_setup(operator, fake)
    fake.bind_answers["p"] = Canned(403, status(403, "Forbidden", "a webhook said no"))
    operator.pod_event(extended_pod("p", 1))
    operator.listed()
    await eventually(lambda: any(s.method == "DELETE" and "resourceclaims" in s.path for s in fake.seen))
    # As kube-scheduler's Unreserve: the finalizer taken off, then the claim deleted; its devices are free again.
    unfinalize = [s for s in fake.requests("PATCH", "/resourceclaims/p-extended-resources-1") if "status" not in s.path]
    assert unfinalize[-1].body == {"metadata": {"finalizers": None}}
    assert ("default", "p-extended-resources-1") not in fake.resource_claims
    await eventually(lambda: not operator.cache.devices.taken())
    del fake.bind_answers["p"]
    # After its backoff, a new claim is made, allocated, and the pod bound.
    await eventually(lambda: len(fake.requests("POST", "/pods/p/binding")) >= 2, timeout=10)
    ((_, name),) = fake.resource_claims
    assert name != "p-extended-resources-1"
    assert fake.resource_claims[("default", name)]["status"]["reservedFor"][0]["uid"] == "uid-p"
