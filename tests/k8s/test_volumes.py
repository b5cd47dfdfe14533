"""The operator's volume watches and the volume PreBind on the fake API server: a pod whose claim is to be
provisioned is bound only after its claim is annotated with the node and shows Bound; a claim that never binds
fails the binding with an Event and frees the choice; pods with claims wait until the volumes are listed; an
unreadable volume is reported. (The static-volume path, with the PV controller, is in tests/e2e/test_volumes_e2e.py.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from scheduler.api.objects import volumes as api_volumes
from scheduler.k8s.operator import Operator
from scheduler.k8s.ports import volume_binding
from tests.k8s.fakeapi import FakeApiServer, eventually
from tests.k8s.test_operator import bound, events, flushed, node, pod


def claim(name: str, *, volume: str = "", storage_class: str = "csi") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "storageClassName": storage_class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }


CSI_CLASS = {
    "metadata": {"name": "csi"},
    "provisioner": "disk.example.com",
    "volumeBindingMode": "WaitForFirstConsumer",
}


def with_claim(raw: dict[str, Any], name: str) -> dict[str, Any]:
    raw["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": name}}]
    return raw


def listed(operator: Operator) -> None:
    for kind in volume_binding.KINDS:
        operator.feed.volumes.part_listed(kind)


async def test_provisioning_is_asked_for_the_node_and_the_pod_is_bound_once_its_claim_is(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.feed.volumes.class_event(CSI_CLASS)
    operator.feed.volumes.claim_event(claim("data"))
    listed(operator)
    operator.pod_event(with_claim(pod("notebook"), "data"))
    operator.listed()
    await eventually(lambda: bool(fake.requests("PATCH", "/persistentvolumeclaims/data")))
    patch = fake.requests("PATCH", "/persistentvolumeclaims/data")[0]
    assert patch.body == {"metadata": {"annotations": {api_volumes.ANNOTATION_SELECTED_NODE: "gpu-0"}}}
    assert patch.content_type == "application/merge-patch+json"
    await asyncio.sleep(0.3)
    assert bound(fake) == {}  # the claim is not bound yet: neither is the pod
    operator.feed.volumes.claim_event(claim("data", volume="pvc-1234"))
    await eventually(lambda: "notebook" in bound(fake))
    assert bound(fake)["notebook"]["target"]["name"] == "gpu-0"


async def test_a_claim_that_never_binds_fails_the_binding_with_an_event_and_the_pod_is_tried_again(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.adapter.volume_binder.settings = volume_binding.VolumeBindingSettings(timeout_s=0.3)
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.feed.volumes.class_event(CSI_CLASS)
    operator.feed.volumes.claim_event(claim("data"))
    listed(operator)
    operator.pod_event(with_claim(pod("notebook"), "data"))
    operator.listed()
    await eventually(lambda: bool(events(fake, "FailedBinding")), timeout=10)
    await flushed(operator)
    message = events(fake, "FailedBinding")[0]["message"]
    assert message.startswith("persistentvolumeclaim default/data is not Bound after 0.3s (provisioning on gpu-0")
    assert bound(fake) == {}
    # The choice was released and the pod is tried again after its backoff (and asks again).
    await eventually(lambda: len(fake.requests("PATCH", "/persistentvolumeclaims/data")) >= 2, timeout=10)


async def test_pods_with_claims_wait_until_the_volumes_are_listed(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.node_event(node("gpu-0"))
    operator.pod_event(with_claim(pod("notebook"), "data"))
    operator.pod_event(pod("plain"))
    operator.listed()
    await eventually(lambda: "plain" in bound(fake))
    await eventually(lambda: bool(events(fake, "FailedScheduling")))
    await flushed(operator)
    (event,) = events(fake, "FailedScheduling")
    assert "not listed yet" in event["message"]  # not "not found": the claim may well exist
    operator.feed.volumes.class_event(CSI_CLASS)
    operator.feed.volumes.claim_event(claim("data", volume="pv-1"))
    operator.feed.volumes.volume_event(
        {"metadata": {"name": "pv-1"}, "spec": {"capacity": {"storage": "1Gi"}}, "status": {"phase": "Bound"}}
    )
    listed(operator)
    await eventually(lambda: "notebook" in bound(fake), timeout=10)  # bound claim: no PreBind work at all
    assert fake.requests("PATCH", "/persistentvolumeclaims/data") == []


async def test_an_unreadable_volume_is_reported_and_left_out(fake: FakeApiServer, operator: Operator) -> None:
    operator.set_leading(True)
    operator.feed.volumes.volume_event({"metadata": {"name": "pv-bad"}, "spec": {"accessModes": ["Sometimes"]}})
    await eventually(lambda: bool(events(fake, "InvalidObject")))
    await flushed(operator)
    (event,) = events(fake, "InvalidObject")
    assert "persistentvolume pv-bad field spec.accessModes" in event["message"]
    assert "pv-bad" not in operator.cache.volumes.volumes
