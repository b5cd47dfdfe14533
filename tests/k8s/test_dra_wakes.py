"""The queueing hints on DRA: a ResourceClaim change wakes the pods the DRA filter refused only when a claim stopped
holding a device; a claim made or allocated for another pod frees nothing for them (the operator on the fake API
server)."""

from __future__ import annotations

import copy
from typing import Any

from scheduler.k8s.operator import Operator
from scheduler.k8s.ports import device_claims
from tests.api import dra_objects as dra
from tests.k8s.fakeapi import FakeApiServer, eventually
from tests.k8s.test_dra import dra_pod, gpu_node
from tests.k8s.test_operator import bound, settled


def _claim(operator: Operator, fake: FakeApiServer, raw: dict[str, Any], *, deleted: bool = False) -> None:
    stored = fake.store_resource_claim(copy.deepcopy(raw))
    operator.feed.devices.claim_event(stored, deleted=deleted)


async def test_a_claim_made_for_another_pod_does_not_wake_a_waiting_one_and_a_deleted_claim_does(
    fake: FakeApiServer, operator: Operator
) -> None:
    operator.set_leading(True)
    operator.node_event(gpu_node("gpu-0"))
    operator.feed.devices.class_event(dra.gpu_class())
    operator.feed.devices.slice_event(dra.gpu_slice("gpu-0", 1))
    # The one GPU is held by the claim of a pod that is gone (its claim not deleted yet): the GPU is free in the
    # cache, the DRA filter refuses the waiting pod's claim.
    held = dra.claim("gone-gpus", dra.request(count=1), allocation=dra.allocation("gpu-0", "gpu-0"))
    _claim(operator, fake, held)
    _claim(operator, fake, dra.claim("w-gpus", dra.request(count=1), owner="w"))
    for kind in device_claims.KINDS:
        operator.feed.devices.part_listed(kind)
    operator.pod_event(dra_pod("w", "w-gpus"))
    operator.listed()
    await eventually(lambda: dict(operator.loop.queue.pending()).get("default/w") == "unschedulable")
    await settled(operator)
    woken = operator.loop.queue.woken
    _claim(operator, fake, dra.claim("x-gpus", dra.request(count=1), owner="x"))  # a new pod's claim: frees nothing
    await settled(operator)
    assert operator.loop.queue.woken == woken
    assert dict(operator.loop.queue.pending()).get("default/w") == "unschedulable"
    _claim(operator, fake, held, deleted=True)  # its device is free now
    await eventually(lambda: "w" in bound(fake), timeout=10)
