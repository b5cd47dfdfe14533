"""Reservations: what is held, for whom and until when; bad input names the Reservation and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import reservation
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects.pod import PodRequest

GPU = "nvidia.com/gpu"
CRD = Path(__file__).resolve().parents[2] / "crds" / "reservations.yaml"
TEMPLATE = {"spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: 8, "cpu": "16"}}}]}}


def raw(name: str = "big", *, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    spec.setdefault("template", TEMPLATE)
    spec.setdefault("owners", [{"labelSelector": {"matchLabels": {"app": "train"}}}])
    out: dict[str, Any] = {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z", "uid": "u1"},
        "spec": spec,
    }
    if status is not None:
        out["status"] = status
    return out


def test_a_reservation_holds_its_template_replicas_until_its_ttl() -> None:
    parsed = reservation.parse_reservation(raw(replicas=2, ttlSeconds=600, queue="research", allocateOnce=True))
    assert (parsed.key, parsed.replicas, parsed.queue, parsed.allocate_once) == ("ml/big", 2, "research", True)
    assert parsed.until == parsed.created + 600
    assert reservation.held(parsed) == {GPU: 16, "cpu": 32000, "pods": 2}
    ghosts = reservation.ghosts(parsed)
    assert [g.gpu.count for g in ghosts] == [8, 8]
    assert len({g.key for g in ghosts}) == 2


def test_without_a_ttl_or_a_time_it_holds_until_deleted_and_a_time_is_read() -> None:
    assert reservation.parse_reservation(raw()).until is None
    parsed = reservation.parse_reservation(raw(expires="2026-01-01T01:00:00Z"))
    assert parsed.until == parsed.created + 3600


def test_the_status_it_wrote_is_read_back() -> None:
    parsed = reservation.parse_reservation(raw(status={"phase": "Available", "nodes": ["gpu-1"]}))
    assert (parsed.phase, parsed.nodes) == ("Available", ("gpu-1",))


def pod(**fields: Any) -> PodRequest:
    return PodRequest(namespace=fields.pop("namespace", "ml"), name="p", **fields)


def test_each_kind_of_owner_names_its_pods_in_the_namespace_only() -> None:
    by_label = reservation.parse_reservation(raw())
    assert by_label.owns(pod(labels={"app": "train"}))
    assert not by_label.owns(pod(labels={"app": "serve"}))
    assert not by_label.owns(pod(labels={"app": "train"}, namespace="other"))
    by_object = reservation.parse_reservation(raw(owners=[{"object": {"kind": "Job", "name": "train"}}]))
    assert by_object.owns(pod(owner_kind="Job", owner_name="train"))
    assert not by_object.owns(pod(owner_kind="Job", owner_name="eval"))
    by_group = reservation.parse_reservation(raw(owners=[{"podGroup": "g"}]))
    assert by_group.owns(pod(labels={"gpusched.io/pod-group": "g"}))
    assert not by_group.owns(pod())


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"replicas": 0}, "spec.replicas"),
        ({"owners": []}, "spec.owners"),
        ({"owners": [{"podGroup": "g", "object": {"kind": "Job", "name": "j"}}]}, "spec.owners[0]"),
        ({"owners": [{"labelSelector": {}}]}, "spec.owners[0].labelSelector"),
        ({"owners": [{"object": {"kind": "Job"}}]}, "spec.owners[0].object.name"),
        ({"ttlSeconds": -5}, "spec.ttlSeconds"),
        ({"expires": "tomorrow"}, "spec.expires"),
        ({"ttlSeconds": 5, "expires": "2026-01-01T01:00:00Z"}, "spec.expires"),
        ({"allocateOnce": "yes"}, "spec.allocateOnce"),
        ({"template": {}}, "spec.template.spec"),
        ({"template": {"spec": {"containers": [{"name": "c"}]}}}, "spec.template.spec"),
        (
            {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "x"}}}]}}},
            "spec.template.spec.containers[0].resources.requests.cpu",
        ),
        ({"topology": {"rack": "x"}}, "spec.topology.rack"),
    ],
)
def test_bad_input_names_the_reservation_and_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        reservation.parse_reservation(raw(**spec))
    assert (caught.value.obj, caught.value.field) == ("reservation ml/big", field)


def test_the_crd_matches_the_parser() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["group"] == reservation.GROUP
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["plural"] == reservation.PLURAL
    assert crd["spec"]["names"]["shortNames"] == ["rsv"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == reservation.VERSION
    assert [c["name"] for c in version["additionalPrinterColumns"][:4]] == ["Phase", "Nodes", "Expires", "Age"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert tuple(schema["status"]["properties"]["phase"]["enum"]) == reservation.PHASES
    spec = schema["spec"]["properties"]
    assert spec["replicas"]["maximum"] == reservation.MAX_REPLICAS
    assert tuple(spec["owners"]["items"]["properties"]) == reservation.OWNER_KEYS


def test_a_pod_s_controller_is_read_by_kind_and_name_for_owner_references() -> None:
    parsed = reservation.parse_reservation(raw(owners=[{"object": {"kind": "Job", "name": "train"}}]))
    ref = {"kind": "Job", "name": "train", "uid": "j1", "controller": True, "apiVersion": "batch/v1"}
    raw_pod = {"metadata": {"name": "train-0", "namespace": "ml", "ownerReferences": [ref]}, "spec": TEMPLATE["spec"]}
    assert parsed.owns(api_pod.parse_pod(raw_pod))
