"""Invalid PodGroups, Queues and Topologies are refused by the API server itself, with a message naming the field.

This is what a user sees from ``kubectl apply``: the CRDs' OpenAPI schemas and CEL rules (crds/) refuse the object
before any scheduler reads it. Valid objects are accepted and get their defaults. No scheduler runs here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.localcluster import APIError

pytestmark = pytest.mark.e2e


def _refused(kube: kube_mod.Kube, path: str, body: dict[str, Any]) -> str:
    """POST ``body``; assert the API server answers 422 Invalid and return its message."""
    with pytest.raises(APIError) as info:
        created = kube.request("POST", path, body)
        # Not refused: remove it so that the next case starts clean, then fail below.
        kube.request("DELETE", f"{path}/{created['metadata']['name']}")
    assert info.value.status == 422, info.value.body
    message: str = json.loads(info.value.body)["message"]
    return message


def _podgroup(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def _queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.gpusched.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _topology(name: str, levels: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({}, "spec.minMember", "Required value"),
        ({"minMember": 0}, "spec.minMember", "should be greater than or equal to 1"),
        ({"minMember": 20000}, "spec", "minMember above 10000 is not supported"),
        ({"minMember": 2, "scheduleTimeoutSeconds": 0}, "spec.scheduleTimeoutSeconds", "greater than or equal to 1"),
        ({"minMember": 2, "minResources": {"nvidia.com/gpu": "eight"}}, "spec.minResources", "should match"),
        (
            {"minMember": 2, "topology": {"required": "rack", "preferred": "rack"}},
            "spec.topology",
            "required and preferred name the same level",
        ),
        ({"minMember": 4, "maxMember": 2}, "spec", "maxMember must be at least minMember"),
        ({"minMember": 4, "segments": {"size": 0, "required": "clique"}}, "spec.segments.size", "greater than or"),
        ({"minMember": 4, "segments": {"size": 2}}, "spec.segments", "a segment needs one level"),
    ],
    ids=[
        "no-minMember",
        "minMember-0",
        "minMember-huge",
        "timeout-0",
        "bad-quantity",
        "same-level-twice",
        "max-below-min",
        "segment-size-0",
        "segment-without-level",
    ],
)
def test_invalid_podgroup_is_refused(scenario: kube_mod.Scenario, spec: dict[str, Any], field: str, words: str) -> None:
    message = _refused(
        scenario.kube, kube_mod.Kube.custom_path("podgroups", scenario.namespace), _podgroup("bad", spec)
    )
    assert field in message and words in message, message


def test_valid_podgroup_gets_its_defaults(scenario: kube_mod.Scenario) -> None:
    created = scenario.create_podgroup(kube_mod.podgroup("train", min_member=4, topology_required="rack"))
    assert created["spec"]["scheduleTimeoutSeconds"] == 600
    listed = scenario.kube.kubectl("get", "gpg", "-n", scenario.namespace).stdout
    assert "train" in listed and "MEMBERS" in listed


@pytest.mark.parametrize(
    ("name", "spec", "field", "words"),
    [
        ("w0", {"weight": 0}, "spec.weight", "should be greater than 0"),
        ("neg", {"guaranteed": {"nvidia.com/gpu": "-1"}}, "spec.guaranteed", "should match"),
        (
            "lim",
            {"guaranteed": {"nvidia.com/gpu": "8"}, "limit": {"nvidia.com/gpu": "4"}},
            "spec.limit",
            "limit of nvidia.com/gpu is below its guarantee",
        ),
        ("self", {"parent": "self"}, "spec.parent", "a queue cannot be its own parent"),
        (
            "frac",
            {"guaranteed": {"nvidia.com/gpu": "1.5"}},
            "spec.guaranteed[nvidia.com/gpu]",
            "spec.guaranteed.nvidia.com/gpu must be a whole number of GPUs",
        ),
        (
            "fraclim",
            {"limit": {"nvidia.com/gpu": "2500m"}},
            "spec.limit[nvidia.com/gpu]",
            "spec.limit.nvidia.com/gpu must be a whole number of GPUs",
        ),
        (
            "fracborrow",
            {"borrowing": {"limit": {"nvidia.com/gpu": "500m"}}},
            "spec.borrowing.limit[nvidia.com/gpu]",
            "spec.borrowing.limit.nvidia.com/gpu must be a whole number of GPUs",
        ),
        ("recl", {"preemption": {"reclaim": "Sometimes"}}, "spec.preemption.reclaim", "Unsupported value"),
        ("hl", {"usageHalfLifeSeconds": -1}, "spec.usageHalfLifeSeconds", "greater than or equal to 0"),
        (
            "minrt",
            {"preemption": {"reclaimMinRuntimeSeconds": -1}},
            "spec.preemption.reclaimMinRuntimeSeconds",
            "greater than or equal to 0",
        ),
        (
            "minrtstr",
            {"consolidation": {"moveMinRuntimeSeconds": "10m"}},
            "spec.consolidation.moveMinRuntimeSeconds",
            "Invalid value",
        ),
    ],
    ids=[
        "weight-0",
        "negative-guarantee",
        "limit-below-guarantee",
        "own-parent",
        "fractional-gpu-guarantee",
        "fractional-gpu-limit",
        "fractional-gpu-borrowing",
        "bad-reclaim",
        "negative-half-life",
        "negative-min-runtime",
        "min-runtime-not-seconds",
    ],
)
def test_invalid_queue_is_refused(
    scenario: kube_mod.Scenario, name: str, spec: dict[str, Any], field: str, words: str
) -> None:
    queue_name = f"{scenario.name}-{name}"
    if spec.get("parent") == "self":
        spec = dict(spec, parent=queue_name)
    message = _refused(scenario.kube, kube_mod.Kube.custom_path("queues"), _queue(queue_name, spec))
    assert field in message and words in message, message


def test_valid_queue_gets_its_defaults(scenario: kube_mod.Scenario) -> None:
    created = scenario.create_queue(kube_mod.queue(f"{scenario.name}-team", guaranteed={"nvidia.com/gpu": "8"}))
    spec = created["spec"]
    assert spec["weight"] == 1
    assert spec["borrowing"]["allowed"] is True and spec["lending"]["allowed"] is True
    assert spec["preemption"] == {"withinQueue": "LowerPriority", "reclaim": "Any"}
    assert spec["usageHalfLifeSeconds"] == 86400
    # 2Gi and 2048Mi are the same quantity: the limit-vs-guarantee rule compares quantities, not strings.
    scenario.create_queue(
        kube_mod.queue(f"{scenario.name}-mem", guaranteed={"memory": "2048Mi"}, limit={"memory": "2Gi"})
    )


HOST = {"nodeLabel": "kubernetes.io/hostname"}
RACK = {"name": "rack", "nodeLabel": "network.topology.gpusched.io/rack"}


@pytest.mark.parametrize(
    ("name", "levels", "words"),
    [
        ("mine", [RACK, HOST], "it must be named default"),
        ("default", [], "spec.levels"),
        ("default", [HOST, RACK], "must be the narrowest (last) level"),
        ("default", [RACK, dict(RACK, name="rack2")], "each nodeLabel may name one level only"),
        ("default", [RACK, {"name": "rack", "nodeLabel": "example.com/row"}], "level names must be unique"),
        ("default", [{"nodeLabel": "not a label"}], "spec.levels[0].nodeLabel"),
    ],
    ids=["not-default", "no-levels", "hostname-not-last", "label-twice", "name-twice", "malformed-label"],
)
def test_invalid_topology_is_refused(
    scenario: kube_mod.Scenario, name: str, levels: list[dict[str, str]], words: str
) -> None:
    message = _refused(scenario.kube, kube_mod.Kube.custom_path("topologies"), _topology(name, levels))
    assert words in message, message
