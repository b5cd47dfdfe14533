"""The claim a pod's extended resources backed by DRA get: its requests and the pod's request mappings, case by case
as kube-scheduler v1.36 builds them (the cases of ``Test_createRequestsAndMappings_requests`` and ``_mappings`` in
pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources_test.go, same pods, same answers)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import extended_resources as ext
from scheduler.api.objects import pod as api_pod
from tests.api import objects

R = "example.com/gpu"
IMPLICIT = ext.IMPLICIT_PREFIX + "classInit"


class PodSpec:
    """Kubernetes' test pod builder: containers ``con<i>``, init containers ``init-con<i>``, sidecars
    ``sidecar-con<i>`` (``i`` their index in their list)."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] = {"containers": [], "initContainers": []}

    def res(self, **amounts: str) -> PodSpec:
        return self._add("containers", "con", amounts, sidecar=False)

    def init(self, **amounts: str) -> PodSpec:
        return self._add("initContainers", "init-con", amounts, sidecar=False)

    def sidecar(self, **amounts: str) -> PodSpec:
        return self._add("initContainers", "sidecar-con", amounts, sidecar=True)

    def _add(self, where: str, prefix: str, amounts: dict[str, str], *, sidecar: bool) -> PodSpec:
        names = {"gpu": R, "gpu1": R + "1", "gpuinit": R + "init", "implicit": IMPLICIT}
        container: dict[str, Any] = {
            "name": f"{prefix}{len(self.spec[where])}",
            "resources": {"requests": {names[k]: v for k, v in amounts.items()}},
        }
        if sidecar:
            container["restartPolicy"] = "Always"
        self.spec[where].append(container)
        return self

    def claim(self, classes: dict[str, str]) -> ext.ExtendedClaim:
        return ext.requests_and_mappings(ext.parse_container_asks(self.spec, obj="pod default/p"), classes)


def requests(claim: ext.ExtendedClaim) -> list[tuple[str, str, int]]:
    out = []
    for r in claim.requests:
        (choice,) = r.choices
        assert choice.mode == api_dra.EXACT_COUNT and choice.name == r.name
        out.append((r.name, choice.device_class, choice.count))
    return out


def mappings(claim: ext.ExtendedClaim) -> list[tuple[str, str, str]]:
    return sorted((m.request, m.container, m.resource) for m in claim.mappings)


POD1 = PodSpec().res(gpu="1", gpu1="2")
POD2 = PodSpec().res(gpu="1").res(gpu1="2")
POD_INIT = PodSpec().res(gpu="1").init(gpuinit="2")
POD_INIT2 = PodSpec().res(gpu="1").init(gpuinit="1").init(gpuinit="2")
POD_INIT3 = PodSpec().res(gpu="1").init(gpuinit="1").sidecar(gpuinit="1").init(gpuinit="2")
CLASSES2 = {R: "class", R + "1": "class1"}
CLASSES_INIT = {R: "class", R + "init": "classInit"}


@pytest.mark.parametrize(
    ("pod", "classes", "want"),
    [
        (POD1, {}, []),
        (POD1, {R: "class"}, [("container-0-request-0", "class", 1)]),
        (POD1, CLASSES2, [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)]),
        (POD2, CLASSES2, [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)]),
        (POD_INIT, CLASSES_INIT, [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)]),
        # Two init containers run one after the other: the larger one's request serves both.
        (
            POD_INIT2,
            CLASSES_INIT,
            [("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)],
        ),
        # The first init container reuses the sidecar's device (it runs beside it); the second needs 2 of its own.
        (
            POD_INIT3,
            CLASSES_INIT,
            [
                ("container-1-request-0", "classInit", 1),
                ("container-2-request-0", "classInit", 2),
                ("container-3-request-0", "class", 1),
            ],
        ),
    ],
)
def test_requests_as_kube_scheduler_makes_them(
    pod: PodSpec, classes: dict[str, str], want: list[tuple[str, str, int]]
) -> None:
    assert requests(pod.claim(classes)) == want


@pytest.mark.parametrize(
    ("pod", "classes", "want"),
    [
        (POD1, CLASSES2, [("container-0-request-0", "con0", R), ("container-0-request-1", "con0", R + "1")]),
        (
            PodSpec().init(gpuinit="1", implicit="2"),
            {**CLASSES_INIT, IMPLICIT: "classInit"},
            [("container-0-request-0", "init-con0", IMPLICIT), ("container-0-request-1", "init-con0", R + "init")],
        ),
        (POD2, CLASSES2, [("container-0-request-0", "con0", R), ("container-1-request-0", "con1", R + "1")]),
        (
            POD_INIT,
            CLASSES_INIT,
            [("container-0-request-0", "init-con0", R + "init"), ("container-1-request-0", "con0", R)],
        ),
        (
            POD_INIT2,
            CLASSES_INIT,
            [
                ("container-1-request-0", "init-con0", R + "init"),
                ("container-1-request-0", "init-con1", R + "init"),
                ("container-2-request-0", "con0", R),
            ],
        ),
        (
            PodSpec().res(gpu="1").init(gpuinit="1").init(implicit="2"),
            {**CLASSES_INIT, IMPLICIT: "classInit"},
            [
                ("container-0-request-0", "init-con0", R + "init"),
                ("container-1-request-0", "init-con1", IMPLICIT),
                ("container-2-request-0", "con0", R),
            ],
        ),
        (
            POD_INIT3,
            CLASSES_INIT,
            [
                ("container-1-request-0", "init-con0", R + "init"),
                ("container-1-request-0", "sidecar-con1", R + "init"),
                ("container-2-request-0", "init-con2", R + "init"),
                ("container-3-request-0", "con0", R),
            ],
        ),
    ],
)
def test_mappings_as_kube_scheduler_makes_them(
    pod: PodSpec, classes: dict[str, str], want: list[tuple[str, str, str]]
) -> None:
    assert mappings(pod.claim(classes)) == want


def test_a_requests_index_is_its_place_among_the_containers_sorted_request_names() -> None:
    raw = objects.pod("p", cpu="1", memory="1Gi", gpus=2)
    pod = api_pod.parse_pod(raw)
    (ask,) = pod.extended_asks
    assert ask.names == ("cpu", "memory", "nvidia.com/gpu") and ask.amounts == (("nvidia.com/gpu", 2),)
    claim = ext.requests_and_mappings(pod.extended_asks, {"nvidia.com/gpu": "gpu.nvidia.com"})
    assert requests(claim) == [("container-0-request-2", "gpu.nvidia.com", 2)]
    # A pod asking no extended resource reads no container twice.
    assert api_pod.parse_pod(objects.pod("plain")).extended_asks == ()


def test_which_names_may_be_backed_by_dra() -> None:
    assert ext.is_extended("nvidia.com/gpu") and ext.is_extended(ext.IMPLICIT_PREFIX + "gpu.nvidia.com")
    assert not ext.is_extended("cpu") and not ext.is_extended("hugepages-2Mi")
    assert not ext.is_extended("kubernetes.io/foo") and not ext.is_extended("node.kubernetes.io/foo")
    assert not ext.is_extended("requests.example.com/foo")


def test_the_claim_and_the_pod_status_as_written() -> None:
    claim = PodSpec().res(gpu="2").claim({R: "class"})
    body = ext.claim_body("ns", "p", "uid-p", claim)
    assert body["metadata"]["generateName"] == "p-extended-resources-"
    assert body["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
    ]
    assert body["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": "class", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    read = api_dra.parse_claim({**body, "metadata": {**body["metadata"], "name": "p-extended-resources-x"}})
    assert read.extended and read.owner_pod == "uid-p"
    assert ext.pod_status_patch("p-extended-resources-x", claim) == {
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": "p-extended-resources-x",
                "requestMappings": [
                    {"containerName": "con0", "resourceName": R, "requestName": "container-0-request-0"}
                ],
            }
        }
    }


def test_a_container_that_is_not_a_map_is_named() -> None:
    with pytest.raises(InvalidObject, match=r"spec.initContainers\[0\]"):
        ext.parse_container_asks({"initContainers": ["x"]}, obj="pod default/p")
