"""Consumable capacity side by side with kube-scheduler (tests/e2e/side_by_side.py): a GPU published with
``allowMultipleAllocations`` and 80Gi of memory asked in steps of 10Gi, three pods each with a claim asking 25Gi
(30Gi once rounded), placed by the stock kube-scheduler and then by ``gpusched run`` on the same objects. Both give
two shares of 30Gi and leave the third pod pending: the same rounding, the same capacity, the same results as the
API server stores them (``consumedCapacity``, a ``shareID`` each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api import dra_objects as dra
from tests.e2e import kube as kube_mod
from tests.e2e import side_by_side
from tests.plugins import test_dra_capacity as capacity

pytestmark = pytest.mark.e2e


def workloads(scheduler: str) -> dict[str, list[dict[str, Any]]]:
    namespace = f"shared-memory-{scheduler}"
    spec = capacity.memory_claim("x", "25Gi")["spec"]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": namespace, "name": "slice-25gi"},
        "spec": {"spec": spec},
    }
    pods = []
    for i in range(3):
        pod = kube_mod.pod(f"share-{i}", scheduler_name=scheduler)
        pod["metadata"]["namespace"] = namespace
        pod["spec"]["resourceClaims"] = [{"name": "mem", "resourceClaimTemplateName": "slice-25gi"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "mem"}]
        pods.append(pod)
    return {namespace: [template, *pods]}


def test_a_device_shared_by_capacity_is_shared_as_kube_scheduler_shares_it(
    tmp_path: Path, gpusched_missing: str | None
) -> None:
    with side_by_side.control_plane(tmp_path, gpusched_missing) as (k, scenario):
        scenario.add_nodes([kube_mod.gpu_node("shared-node", gpus=0)])
        expression = f"device.attributes['{dra.DRIVER}'].shareable"
        side_by_side.apply(k, dra.gpu_class(capacity.SHARED_CLASS, expression))
        side_by_side.apply(k, capacity.shared_gpu_slice("shared-node"))
        results = side_by_side.run_both(k, scenario, workloads, timeout=30)

    for scheduler, placed in results.items():
        assert len(placed) == 2, (scheduler, placed)
        shares = [r for _node, claims in placed.values() for claim in claims for r in claim]
        assert [(r["device"], r["consumedCapacity"]) for r in shares] == [("gpu-0", {"memory": "30Gi"})] * 2, shares
        assert len({r["shareID"] for r in shares}) == 2, shares
