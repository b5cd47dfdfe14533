"""DRA objects as the scheduler reads them, and the CEL of their selectors with Kubernetes' additions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import cel as api_cel
from scheduler.api.devices import dra as api_dra
from scheduler.api.devices import nvidia_gpus
from scheduler.api.objects import pod as api_pod
from tests.api import dra_objects as dra
from tests.api import objects


def _device(**attributes: Any) -> api_dra.Device:
    raw = dra.gpu_slice("n", 1)
    raw["spec"]["devices"][0]["attributes"].update(attributes)
    return api_dra.parse_resource_slice(raw).devices[0]


def _matches(expression: str, device: api_dra.Device) -> bool:
    compiled = api_cel.compile_expression(expression, obj="deviceclass c", field="spec.selectors[0].cel.expression")
    return api_cel.matches(compiled, device.variable())


def test_a_slice_reads_as_nvidias_driver_publishes_it() -> None:
    s = api_dra.parse_resource_slice(dra.gpu_slice("node-a", 8))
    assert (s.driver, s.pool, s.node, s.generation, s.slice_count) == ("gpu.nvidia.com", "node-a", "node-a", 1, 1)
    gpu = s.devices[5]
    assert gpu.key == ("gpu.nvidia.com", "node-a", "gpu-5")
    assert gpu.attribute("productName") == "NVIDIA H100 80GB HBM3"
    assert gpu.attribute(dra.PCIE_ROOT) == "pci0000:01"
    assert gpu.attribute("driverVersion") == api_cel.Version("570.86.15")
    assert gpu.capacity["gpu.nvidia.com/memory"] == 80 * 2**30 * 1000  # milli-units
    assert nvidia_gpus.is_gpu(gpu)
    assert sorted(s.devices, key=nvidia_gpus.gpu_order)[-1].name == "gpu-7"


def test_selectors_read_attributes_capacity_quantities_and_versions() -> None:
    gpu = _device()
    assert _matches("device.driver == 'gpu.nvidia.com'", gpu)
    assert _matches("device.attributes['gpu.nvidia.com'].type == 'gpu'", gpu)
    assert _matches("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'", gpu)
    assert _matches("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0", gpu)
    assert _matches("device.capacity['gpu.nvidia.com'].memory == quantity('80Gi')", gpu)
    assert not _matches("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80Gi'))", gpu)
    assert _matches("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('570.9.0'))", gpu)
    assert _matches("device.attributes['gpu.nvidia.com'].cudaComputeCapability.isLessThan(semver('10.0.0'))", gpu)
    assert _matches("'gpu.nvidia.com' in device.attributes && !('example.com' in device.attributes)", gpu)


def test_an_attribute_the_device_lacks_is_an_error_not_a_silent_match() -> None:
    with pytest.raises(api_cel.CelError, match=r"deviceclass c field spec\.selectors"):
        _matches("device.attributes['gpu.nvidia.com'].nvlinkDomain == 1", _device())
    with pytest.raises(api_cel.CelError, match="not a bool"):
        _matches("device.attributes['gpu.nvidia.com'].productName", _device())
    assert not _matches("has(device.attributes['gpu.nvidia.com'].nvlinkDomain)", _device())


def test_nvidias_quickstart_selector_uses_the_strings_library() -> None:
    # NVIDIA's DRA driver demo (gpu-test6); tests/api/test_cel_reference.py holds every library function against
    # Kubernetes' own evaluator, this one runs without Go.
    expression = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')"
    assert not _matches(expression, _device())  # an H100
    assert _matches(expression, _device(productName={"string": "NVIDIA A100-SXM4-40GB"}))
    assert _matches("!has(device.attributes['other.example.com'].x)", _device())


def test_a_broken_expression_names_the_object_and_field() -> None:
    raw = dra.gpu_class("broken", "device.driver ==")
    with pytest.raises(InvalidObject) as err:
        api_dra.parse_device_class(raw)
    assert err.value.obj == "deviceclass broken" and err.value.field == "spec.selectors[1].cel.expression"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda r: r["spec"]["devices"]["requests"][0]["exactly"].pop("deviceClassName"),
            "spec.devices.requests[0].exactly.deviceClassName",
        ),
        (
            lambda r: r["spec"]["devices"]["requests"][0]["exactly"].update(count=0),
            "spec.devices.requests[0].exactly.count",
        ),
        (
            lambda r: r["spec"]["devices"]["requests"][0]["exactly"].update(allocationMode="Some"),
            "spec.devices.requests[0].exactly.allocationMode",
        ),
        (
            lambda r: r["spec"]["devices"].update(constraints=[{"matchAttribute": "pcieRoot"}]),
            "spec.devices.constraints[0].matchAttribute",
        ),
        (
            lambda r: r["spec"]["devices"].update(constraints=[{"requests": ["nope"], "matchAttribute": "a/b"}]),
            "spec.devices.constraints[0].requests",
        ),
    ],
)
def test_a_bad_claim_names_the_field(change: Any, field: str) -> None:
    raw = dra.claim("c", dra.request())
    change(raw)
    with pytest.raises(InvalidObject) as err:
        api_dra.parse_claim(raw)
    assert err.value.obj == "resourceclaim default/c" and err.value.field == field


def test_a_claim_reads_its_requests_constraints_allocation_and_users() -> None:
    raw = dra.claim("c", dra.request("a", 2), dra.request("b", 1, admin=True), same=dra.PCIE_ROOT, owner="p")
    raw["status"] = {
        "allocation": dra.allocation("n", "gpu-0", "gpu-1"),
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}],
    }
    claim = api_dra.parse_claim(raw)
    assert [r.name for r in claim.requests] == ["a", "b"]
    assert claim.requests[0].choices[0].count == 2 and claim.requests[1].choices[0].admin_access
    assert claim.constraints == (api_dra.Constraint((), dra.PCIE_ROOT),)
    assert claim.allocation is not None and claim.allocation.node == "n"
    assert [d.device for d in claim.allocation.devices] == ["gpu-0", "gpu-1"]
    assert claim.reserved_for == (api_dra.Consumer("pods", "p", "uid-p"),)
    assert claim.owner_pod == "uid-p"


def test_a_pod_names_its_claims_and_the_ones_made_from_its_templates() -> None:
    raw = dra.with_claims(objects.pod("p"), "shared", templates={"gpu": "p-gpu-x1", "nic": ""})
    pod = api_pod.parse_pod(raw)
    assert [(c.name, c.claim_name, c.template) for c in pod.resource_claims] == [
        ("c0", "shared", ""),
        ("gpu", "p-gpu-x1", "gpu-template"),
        ("nic", "", "nic-template"),
    ]
    bad = objects.pod("q")
    bad["spec"]["resourceClaims"] = [{"name": "x", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]
    with pytest.raises(InvalidObject) as err:
        api_pod.parse_pod(bad)
    assert err.value.field == "spec.resourceClaims[0]"


def test_a_pod_gets_gpus_from_a_device_plugin_or_from_claims_not_both() -> None:
    with pytest.raises(InvalidObject, match="not both"):
        api_pod.parse_pod(dra.with_claims(objects.pod("p", gpus=1), "c"))
    # Bound, with the GPUs gpusched allocated through its claims: those count as its GPUs.
    bound = dra.with_claims(objects.pod("p", node_name="n", annotations={"gpusched.io/gpu-ids": "2,3"}), "c")
    pod = api_pod.parse_pod(bound)
    assert pod.gpu.whole and pod.gpu.count == 2 and pod.gpu_ids == (2, 3)


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(min_value=0, max_value=7), st.booleans()),
        min_size=1,
        max_size=8,
        unique_by=lambda t: t[1],
    ),
    st.sampled_from(["", "node-1"]),
)
def test_an_allocation_reads_back_as_written(devices: list[tuple[str, int, bool]], node: str) -> None:
    results: list[dict[str, Any]] = [
        {
            "request": r,
            "driver": dra.DRIVER,
            "pool": "p",
            "device": f"gpu-{i}",
            **({"adminAccess": True} if admin else {}),
        }
        for r, i, admin in devices
    ]
    allocation: dict[str, Any] = {"devices": {"results": results}}
    if node:
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
    raw = dra.claim("c", dra.request("a"), dra.request("b"), allocation=allocation)
    parsed = api_dra.parse_claim(raw).allocation
    assert parsed is not None and parsed.node == node
    assert [(d.request, d.device, d.admin_access) for d in parsed.devices] == [
        (r, f"gpu-{i}", a) for r, i, a in devices
    ]
