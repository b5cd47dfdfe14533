"""NVIDIA's own DRA examples (tests/e2e/nvidia_specs.py: the quickstart's gpu-test-count and gpu-test7, the
extended-resources demos gpu-full and mig-1g-12gb, the chart's DeviceClasses), placed by the stock kube-scheduler
and by ``gpusched run`` on one local control plane of their own, one after the other, on kwok nodes whose
ResourceSlices are shaped as the driver publishes them: a node of 8 whole GPUs and a node of 2 GH200s in static MIG
(7 x 1g.12gb each). Only ``schedulerName`` differs: every pod kube-scheduler places, gpusched places, with devices
of the same kind (whole GPU or MIG), every claim allocated on the pod's node and reserved for it, no device given
twice, and the pods asking ``nvidia.com/gpu`` with the claim made for them named in their status.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import kube as kube_mod
import nvidia_specs as specs
import pytest
from localcluster import APIError, LocalCluster, cached_binaries
from skips import required, skip_or_fail

pytestmark = pytest.mark.e2e

API = "/apis/resource.k8s.io/v1"
SCHEDULERS = ("default-scheduler", "gpusched")


def _apply(k: kube_mod.Kube, obj: dict[str, Any]) -> None:
    namespace = obj["metadata"].get("namespace")
    kind = obj["kind"]
    if kind == "Pod":
        path = kube_mod.Kube.pods_path(namespace)
    elif kind == "DeviceClass":
        path = f"{API}/deviceclasses"
    elif kind == "ResourceSlice":
        path = f"{API}/resourceslices"
    else:
        path = f"{API}/namespaces/{namespace}/resourceclaimtemplates"
    k.request("POST", path, obj)


def _placed(k: kube_mod.Kube, scheduler: str, timeout: float) -> dict[str, dict[str, Any]]:
    """namespace/pod -> the pod, for the pods of ``scheduler`` on a node once all are, or at ``timeout``."""
    names = {
        f"{ns}/{o['metadata']['name']}"
        for ns, objs in specs.workloads(scheduler).items()
        for o in objs
        if o["kind"] == "Pod"
    }
    pods: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = {}
        for key in names:
            ns, name = key.split("/")
            with contextlib.suppress(APIError):
                pod = k.pod(ns, name)
                if kube_mod.node_of(pod):
                    pods[key] = pod
        if len(pods) == len(names):
            break
        time.sleep(1)
    return pods


def _claims(k: kube_mod.Kube, namespace: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in k.request("GET", f"{API}/namespaces/{namespace}/resourceclaims")["items"]}


def _pod_claims(k: kube_mod.Kube, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims a placed pod holds: its templates' and the one made for its extended resources."""
    namespace = pod["metadata"]["namespace"]
    claims = _claims(k, namespace)
    names = [s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or []]
    extended = pod["status"].get("extendedResourceClaimStatus")
    if extended:
        names.append(extended["resourceClaimName"])
    return [claims[n] for n in names]


def _devices(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def _run(k: kube_mod.Kube, scheduler: str) -> dict[str, tuple[str, list[list[str]]]]:
    """Apply the examples for ``scheduler``; pod -> (node, devices per claim) for the pods it placed."""
    for namespace, objects in specs.workloads(scheduler).items():
        k.ensure_namespace(namespace)
        for obj in objects:
            _apply(k, obj)
    placed = _placed(k, scheduler, timeout=90)
    out: dict[str, tuple[str, list[list[str]]]] = {}
    held: set[tuple[str, str]] = set()
    for key, pod in placed.items():
        node = kube_mod.node_of(pod)
        claims = _pod_claims(k, pod)
        assert claims, f"{scheduler}: {key} is on {node} with no claim"
        for claim in claims:
            terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
            assert terms[0]["matchFields"][0]["values"] == [node], (scheduler, key, claim["metadata"]["name"])
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
            for device in _devices(claim):
                assert (node, device) not in held, f"{scheduler}: {device} on {node} given twice"
                held.add((node, device))
        out[key] = (node, [_devices(c) for c in claims])
    return out


def _kind(devices: list[list[str]]) -> list[list[str]]:
    return [["mig" if "-mig-" in d else "gpu" for d in claim] for claim in devices]


def _unsuffixed(key: str, scheduler: str) -> str:
    namespace, name = key.split("/")
    return f"{namespace.removesuffix(f'-{scheduler}')}/{name}"


def _both(k: kube_mod.Kube, scenario: kube_mod.Scenario, results: dict[str, Any]) -> None:
    """Each scheduler in turn places the examples; the next one starts once the previous one's pods are gone."""
    for scheduler in SCHEDULERS:
        if scheduler == "gpusched":
            scenario.start_gpusched()
        placed = _run(k, scheduler)
        results[scheduler] = {_unsuffixed(key, scheduler): value for key, value in placed.items()}
        # The examples go before the next scheduler's: their claims are deallocated and deleted with them.
        for namespace in specs.workloads(scheduler):
            for pod in k.pods(namespace):
                k.request(
                    "DELETE",
                    kube_mod.Kube.pods_path(namespace, pod["metadata"]["name"]),
                    query={"gracePeriodSeconds": "0"},
                )
        kube_mod.wait_until(
            lambda sch=scheduler: not any(_claims(k, ns) for ns in specs.workloads(sch)),
            timeout=90,
            what=f"the claims of {scheduler}'s pods gone",
        )


def test_nvidias_examples_place_with_gpusched_as_with_kube_scheduler(
    tmp_path: Path, gpusched_missing: str | None
) -> None:
    if gpusched_missing is not None:
        skip_or_fail(f"`gpusched run` is not available in this checkout ({gpusched_missing})")
    if cached_binaries() is None and not required():
        pytest.skip("control-plane binaries not built: run tests/e2e/build-controlplane.sh")
    with LocalCluster(with_scheduler=True, verbose=False) as cluster:
        k = kube_mod.Kube.of_local(cluster)
        k.apply_crds()
        k.ensure_namespace(kube_mod.SYSTEM_NAMESPACE)
        scenario = kube_mod.Scenario(kube=k, name="nvidia-specs", namespace="nvidia-specs", workdir=tmp_path)
        scenario.add_nodes([kube_mod.gpu_node("gpu-node", gpus=0), kube_mod.gpu_node("mig-node", gpus=0)])
        for obj in specs.chart_classes():
            _apply(k, obj)
        _apply(k, specs.dra.gpu_slice("gpu-node", 8))
        _apply(k, specs.static_mig_slice("mig-node"))
        time.sleep(1.1)  # the demo's class is applied after the chart's: the newer class maps nvidia.com/gpu
        _apply(k, specs.mig_1g_class())

        results: dict[str, dict[str, tuple[str, list[list[str]]]]] = {}
        try:
            _both(k, scenario, results)
        finally:
            for replica in scenario.schedulers:
                print(f"\n----- {replica.identity} -----\n{replica.log_tail(40)}", file=sys.stderr)
            scenario.cleanup()

    kube_scheduler, gpusched = results["default-scheduler"], results["gpusched"]
    for scheduler, placed in results.items():
        print(f"\n[nvidia specs] {scheduler}: {placed}")
    # kube-scheduler places all four: the comparison means something.
    assert len(kube_scheduler) == 4, kube_scheduler
    assert set(gpusched) == set(kube_scheduler), (kube_scheduler, gpusched)
    for key, (node, devices) in kube_scheduler.items():
        g_node, g_devices = gpusched[key]
        assert g_node == node and _kind(g_devices) == _kind(devices), (key, kube_scheduler[key], gpusched[key])
