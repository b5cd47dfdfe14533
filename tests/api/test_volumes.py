"""Parsing of claims, volumes, storage classes and CSINodes as kube-scheduler's volume plugins read them, and bad
input named by object and field."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.selectors import NodeSelectorTerm, Requirement


def test_a_claims_class_comes_from_the_legacy_annotation_first_and_modes_default() -> None:
    claim = api_volumes.parse_claim(
        {
            "metadata": {
                "name": "data",
                "namespace": "shop",
                "uid": "u1",
                "annotations": {api_volumes.ANNOTATION_CLASS: "legacy", api_volumes.ANNOTATION_SELECTED_NODE: "n1"},
                "ownerReferences": [{"uid": "pod-uid", "controller": True}],
            },
            "spec": {
                "storageClassName": "modern",
                "accessModes": ["ReadWriteOncePod"],
                "resources": {"requests": {"storage": "2Gi"}},
                "selector": {"matchLabels": {"tier": "fast"}},
            },
        }
    )
    assert claim.key == "shop/data" and claim.storage_class == "legacy"
    assert claim.request == 2 * 1024**3 and claim.volume_mode == "Filesystem"
    assert claim.access_modes == {api_volumes.READ_WRITE_ONCE_POD}
    assert claim.selected_node == "n1" and claim.owner == "pod-uid" and not claim.bound
    assert claim.selector is not None and claim.selector.matches({"tier": "fast"})
    assert not claim.selector.matches({"tier": "slow"})
    assert api_volumes.parse_claim({"metadata": {"name": "x"}, "spec": {}}).selector is None


def test_a_volumes_node_affinity_claim_ref_and_csi_source_are_read() -> None:
    volume = api_volumes.parse_volume(
        {
            "metadata": {"name": "pv-1", "labels": {"topology.kubernetes.io/zone": "a__b"}},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "local",
                "volumeMode": "Block",
                "claimRef": {"namespace": "shop", "name": "data", "uid": "u1"},
                "csi": {"driver": "disk.example.com", "volumeHandle": "h1"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
                                ]
                            }
                        ]
                    }
                },
            },
            "status": {"phase": "Bound"},
        }
    )
    assert volume.node_affinity == (NodeSelectorTerm(labels=(Requirement("kubernetes.io/hostname", "In", ("n1",)),)),)
    assert volume.capacity == 10 * 1024**3 and volume.volume_mode == "Block" and volume.phase == "Bound"
    assert (volume.csi_driver, volume.csi_handle) == ("disk.example.com", "h1")
    assert volume.bound_to(api_volumes.Claim(namespace="shop", name="data", uid="u1"))
    assert not volume.bound_to(api_volumes.Claim(namespace="shop", name="data", uid="u2"))
    (zone,) = api_volumes.zone_terms(volume)
    assert zone.labels == (Requirement("topology.kubernetes.io/zone", "In", ("a", "b")),)


def test_a_storage_class_binding_mode_topologies_and_default_flag() -> None:
    sc = api_volumes.parse_storage_class(
        {
            "metadata": {"name": "csi", "annotations": {api_volumes.ANNOTATION_DEFAULT_CLASS: "true"}},
            "provisioner": "disk.example.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}],
        }
    )
    assert sc.wait_for_first_consumer and sc.default
    assert sc.allowed_topologies == (NodeSelectorTerm(labels=(Requirement("zone", "In", ("a", "b")),)),)
    assert not api_volumes.parse_storage_class({"metadata": {"name": "x"}}).wait_for_first_consumer


def test_a_csi_node_lists_the_limits_of_drivers_that_report_one() -> None:
    node = api_volumes.parse_csi_node(
        {
            "metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "a", "allocatable": {"count": 3}}, {"name": "b", "nodeID": "x"}]},
        }
    )
    assert node.limits == {"a": 3}


@pytest.mark.parametrize(
    ("parse", "raw", "obj", "field"),
    [
        (
            api_volumes.parse_claim,
            {"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteSometimes"]}},
            "persistentvolumeclaim default/c",
            "spec.accessModes",
        ),
        (
            api_volumes.parse_claim,
            {"metadata": {"name": "c"}, "spec": {"resources": {"requests": {"storage": "lots"}}}},
            "persistentvolumeclaim default/c",
            "spec.resources.requests.storage",
        ),
        (
            api_volumes.parse_volume,
            {"metadata": {"name": "v"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": []}}}},
            "persistentvolume v",
            "spec.nodeAffinity.required",
        ),
        (
            api_volumes.parse_storage_class,
            {"metadata": {"name": "s"}, "volumeBindingMode": "Later"},
            "storageclass s",
            "volumeBindingMode",
        ),
        (
            api_volumes.parse_csi_node,
            {"metadata": {"name": "n"}, "spec": {"drivers": [{"name": "a", "allocatable": {"count": -1}}]}},
            "csinode n",
            "spec.drivers[0].allocatable.count",
        ),
    ],
)
def test_bad_input_names_the_object_and_the_field(parse: Any, raw: dict[str, Any], obj: str, field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        parse(raw)
    assert err.value.obj == obj and err.value.field == field


def test_a_pods_claims_need_names_and_ephemeral_claims_are_named_after_pod_and_volume() -> None:
    spec = {"volumes": [{"name": "v", "persistentVolumeClaim": {}}]}
    with pytest.raises(InvalidObject) as err:
        api_volumes.parse_pod_claims(spec, pod_name="p", obj="pod default/p")
    assert err.value.field == "spec.volumes[0].persistentVolumeClaim.claimName"
    claims = api_volumes.parse_pod_claims(
        {"volumes": [{"name": "cache", "ephemeral": {"volumeClaimTemplate": {}}}, {"name": "e", "emptyDir": {}}]},
        pod_name="web-0",
        obj="pod default/web-0",
    )
    assert claims == (api_volumes.PodClaim("web-0-cache", "cache", ephemeral=True),)
