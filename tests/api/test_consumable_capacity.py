"""Consumable capacity as kube-scheduler v1.36's allocator computes it: what a request consumes of each capacity of a
device, and which amounts a capacity's ``requestPolicy`` refuses; the cases of k8s.io/dynamic-resource-allocation
structured/internal/incubating/consumable_capacity_test.go, same inputs, same answers (amounts here in milli-units,
1 = 1000)."""

from __future__ import annotations

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import consumable_capacity as cc
from scheduler.api.devices import dra as api_dra

ONE, TWO, THREE = 1000, 2000, 3000


def test_what_a_request_consumes_of_each_capacity() -> None:
    # With a request and a default: the request; no request but a default: the default; no request and no policy:
    # the whole capacity.
    policies = {
        "capacity-0": cc.RequestPolicy(default=TWO, min=ONE),
        "capacity-1": cc.RequestPolicy(default=ONE, min=ONE),
    }
    capacity = {"capacity-0": TWO, "capacity-1": TWO, "dummy": ONE}
    assert cc.consumption({"capacity-0": ONE, "dummy": ONE}, capacity, policies) == {
        "capacity-0": ONE,
        "capacity-1": ONE,
        "dummy": ONE,
    }
    # A capacity the device does not publish: it cannot have the device.
    assert cc.consumption({"other": ONE}, capacity, policies) is None


@pytest.mark.parametrize(
    ("amount", "policy", "violated"),
    [
        (ONE, cc.RequestPolicy(default=ONE, min=ONE, max=TWO), False),
        (TWO, cc.RequestPolicy(default=ONE, min=ONE, max=ONE), True),
        (ONE, cc.RequestPolicy(default=ONE, values=(ONE,)), False),
        (TWO, cc.RequestPolicy(default=ONE, values=(ONE,)), True),
        (TWO, cc.RequestPolicy(min=ONE, step=TWO), True),  # off the step
    ],
)
def test_what_a_policy_refuses(amount: int, policy: cc.RequestPolicy, violated: bool) -> None:
    assert policy.violated(amount) is violated


@pytest.mark.parametrize(
    ("asked", "value", "policy", "consumed"),
    [
        (None, ONE, cc.RequestPolicy(), ONE),  # empty
        (None, TWO, cc.RequestPolicy(default=ONE, min=ONE), ONE),  # min in range
        (None, TWO, cc.RequestPolicy(default=ONE, values=(ONE,)), ONE),  # default in set
        (TWO, TWO, cc.RequestPolicy(default=ONE, min=ONE), TWO),  # more than min in range
        (ONE, TWO, cc.RequestPolicy(default=ONE, min=TWO), TWO),  # less than min in range
        (TWO, THREE, cc.RequestPolicy(default=ONE, min=ONE, step=TWO), THREE),  # with step (round up)
        (TWO, TWO, cc.RequestPolicy(default=ONE, min=ONE, step=ONE), TWO),  # with step (no remaining)
        (TWO, THREE, cc.RequestPolicy(default=ONE, values=(ONE, TWO, THREE)), TWO),  # valid value in set
        (TWO, THREE, cc.RequestPolicy(default=ONE, values=(ONE, THREE)), THREE),  # set (round up)
        (THREE, THREE, cc.RequestPolicy(default=ONE, values=(ONE, TWO)), THREE),  # larger than set
    ],
)
def test_what_a_request_consumes_under_a_policy(
    asked: int | None, value: int, policy: cc.RequestPolicy, consumed: int
) -> None:
    assert policy.consumed(asked, value) == consumed


def _slice(policy: dict[str, object]) -> dict[str, object]:
    device = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "80Gi", "requestPolicy": policy}},
    }
    spec = {"driver": "gpu.nvidia.com", "nodeName": "a", "pool": {"name": "a"}, "devices": [device]}
    return {"metadata": {"name": "s"}, "spec": spec}


def test_a_slice_and_a_claim_as_read() -> None:
    gi = 1024**3 * 1000
    raw = _slice({"default": "10Gi", "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"}})
    (device,) = api_dra.parse_resource_slice(raw).devices
    assert device.multiple and device.capacity == {"gpu.nvidia.com/memory": 80 * gi}
    assert device.policies["gpu.nvidia.com/memory"] == cc.RequestPolicy(10 * gi, 10 * gi, 80 * gi, 10 * gi)
    request = {"name": "r", "exactly": {"deviceClassName": "c", "capacity": {"requests": {"memory": "25Gi"}}}}
    result = {
        "request": "r",
        "driver": "gpu.nvidia.com",
        "pool": "a",
        "device": "gpu-0",
        "shareID": "8c8dfb3e-7a43-4a2b-9c1e-3f2b1a0c9d55",
        "consumedCapacity": {"memory": "30Gi"},
    }
    claim = api_dra.parse_claim(
        {
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"devices": {"requests": [request]}},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }
    )
    (choice,) = claim.requests[0].choices
    assert choice.capacity == (("memory", 25 * gi),)
    assert choice.consumption(device) == {"gpu.nvidia.com/memory": 30 * gi}  # rounded up to the step
    assert claim.allocation is not None
    (share,) = claim.allocation.devices
    assert share.share_id and share.consumed == (("gpu.nvidia.com/memory", 30 * gi),)


def test_a_bad_policy_names_the_field() -> None:
    with pytest.raises(InvalidObject, match=r"capacity\.memory\.requestPolicy\.validRange\.step"):
        api_dra.parse_resource_slice(_slice({"validRange": {"min": "1Gi", "step": "x"}}))
