"""NVIDIA's own DRA examples (tests/e2e/nvidia_specs.py: the quickstart's gpu-test-count and gpu-test7, the
extended-resources demos gpu-full and mig-1g-12gb, the chart's DeviceClasses), placed by the stock kube-scheduler
and by ``gpusched run`` on one local control plane of their own, one after the other (tests/e2e/side_by_side.py), on
kwok nodes whose ResourceSlices are shaped as the driver publishes them: a node of 8 whole GPUs and a node of 2 GH200s
in static MIG (7 x 1g.12gb each). Only ``schedulerName`` differs: every pod kube-scheduler places, gpusched places,
on the same node with devices of the same kind (whole GPU or MIG), every claim allocated on the pod's node and
reserved for it, no device given twice, and the pods asking ``nvidia.com/gpu`` with the claim made for them named in
their status.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e import nvidia_specs as specs
from tests.e2e import side_by_side

pytestmark = pytest.mark.e2e


def _kinds(results: list[list[dict[str, Any]]]) -> list[list[str]]:
    return [["mig" if "-mig-" in r["device"] else "gpu" for r in claim] for claim in results]


def test_nvidias_examples_place_with_gpusched_as_with_kube_scheduler(
    tmp_path: Path, gpusched_missing: str | None
) -> None:
    with side_by_side.control_plane(tmp_path, gpusched_missing) as (k, scenario):
        scenario.add_nodes([kube_mod.gpu_node("gpu-node", gpus=0), kube_mod.gpu_node("mig-node", gpus=0)])
        for obj in specs.chart_classes():
            side_by_side.apply(k, obj)
        side_by_side.apply(k, specs.dra.gpu_slice("gpu-node", 8))
        side_by_side.apply(k, specs.static_mig_slice("mig-node"))
        time.sleep(1.1)  # the demo's class is applied after the chart's: the newer class maps nvidia.com/gpu
        side_by_side.apply(k, specs.mig_1g_class())
        results = side_by_side.run_both(k, scenario, specs.workloads, timeout=90)

    kube_scheduler, gpusched = results["default-scheduler"], results["gpusched"]
    # kube-scheduler places all four: the comparison means something.
    assert len(kube_scheduler) == 4, kube_scheduler
    assert set(gpusched) == set(kube_scheduler), (kube_scheduler, gpusched)
    for key, (node, claims) in kube_scheduler.items():
        g_node, g_claims = gpusched[key]
        assert g_node == node and _kinds(g_claims) == _kinds(claims), (key, kube_scheduler[key], gpusched[key])
