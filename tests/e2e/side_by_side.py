"""The stock kube-scheduler and ``gpusched run`` on one local control plane of their own, one after the other, on the
same DRA objects: each scheduler's pods are created (only ``schedulerName`` and the namespaces' suffix differ), what it
placed is read and checked (every claim allocated on the pod's node and reserved for it, no device given twice but as
shares of a device that allows multiple allocations), then its pods are deleted and their claims go before the next
scheduler starts. Used by test_nvidia_specs_e2e.py and test_capacity_side_by_side_e2e.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.localcluster import APIError, LocalCluster, cached_binaries
from tests.e2e.skips import required, skip_or_fail

API = "/apis/resource.k8s.io/v1"
SCHEDULERS = ("default-scheduler", "gpusched")
#: Scheduler -> its workloads: namespace (ending in the scheduler's name) -> objects, in the order they are applied.
Workloads = Callable[[str], dict[str, list[dict[str, Any]]]]
#: pod (namespace without the scheduler's suffix / name) -> (node, the allocation results of each of its claims).
Placed = dict[str, tuple[str, list[list[dict[str, Any]]]]]


@contextlib.contextmanager
def control_plane(tmp_path: Path, gpusched_missing: str | None) -> Iterator[tuple[kube_mod.Kube, kube_mod.Scenario]]:
    """A local control plane with kube-scheduler running, the CRDs applied, and a scenario to add nodes to."""
    if gpusched_missing is not None:
        skip_or_fail(f"`gpusched run` is not available in this checkout ({gpusched_missing})")
    if cached_binaries() is None and not required():
        pytest.skip("control-plane binaries not built: run tests/e2e/build-controlplane.sh")
    with LocalCluster(with_scheduler=True, verbose=False) as cluster:
        k = kube_mod.Kube.of_local(cluster)
        k.apply_crds()
        k.ensure_namespace(kube_mod.SYSTEM_NAMESPACE)
        scenario = kube_mod.Scenario(kube=k, name="side-by-side", namespace="side-by-side", workdir=tmp_path)
        yield k, scenario


def apply(k: kube_mod.Kube, obj: dict[str, Any]) -> None:
    namespace = obj["metadata"].get("namespace")
    paths = {
        "Pod": kube_mod.Kube.pods_path(namespace or ""),
        "DeviceClass": f"{API}/deviceclasses",
        "ResourceSlice": f"{API}/resourceslices",
    }
    k.request("POST", paths.get(obj["kind"], f"{API}/namespaces/{namespace}/resourceclaimtemplates"), obj)


def claims(k: kube_mod.Kube, namespace: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in k.request("GET", f"{API}/namespaces/{namespace}/resourceclaims")["items"]}


def _pod_claims(k: kube_mod.Kube, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims a placed pod holds: its templates' and the one made for its extended resources."""
    made = claims(k, pod["metadata"]["namespace"])
    names = [s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or []]
    extended = pod["status"].get("extendedResourceClaimStatus")
    if extended:
        names.append(extended["resourceClaimName"])
    return [made[n] for n in names]


def _placed(k: kube_mod.Kube, workloads: dict[str, list[dict[str, Any]]], timeout: float) -> dict[str, dict[str, Any]]:
    """namespace/pod -> the pod, for the pods on a node once all are, or at ``timeout``."""
    names = {f"{ns}/{o['metadata']['name']}" for ns, objs in workloads.items() for o in objs if o["kind"] == "Pod"}
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


def _run(k: kube_mod.Kube, scheduler: str, workloads: dict[str, list[dict[str, Any]]], timeout: float) -> Placed:
    for namespace, objects in workloads.items():
        k.ensure_namespace(namespace)
        for obj in objects:
            apply(k, obj)
    out: Placed = {}
    held: set[tuple[str, str]] = set()
    for key, pod in _placed(k, workloads, timeout).items():
        node = kube_mod.node_of(pod)
        held_claims = _pod_claims(k, pod)
        assert held_claims, f"{scheduler}: {key} is on {node} with no claim"
        for claim in held_claims:
            terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
            assert terms[0]["matchFields"][0]["values"] == [node], (scheduler, key, claim["metadata"]["name"])
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
            for result in claim["status"]["allocation"]["devices"]["results"]:
                if result.get("shareID"):
                    continue  # a share: the capacity check is the test's
                assert (node, result["device"]) not in held, f"{scheduler}: {result['device']} on {node} given twice"
                held.add((node, result["device"]))
        namespace, name = key.split("/")
        unsuffixed = f"{namespace.removesuffix(f'-{scheduler}')}/{name}"
        out[unsuffixed] = (node, [c["status"]["allocation"]["devices"]["results"] for c in held_claims])
    return out


def run_both(
    k: kube_mod.Kube, scenario: kube_mod.Scenario, workloads: Workloads, *, timeout: float
) -> dict[str, Placed]:
    """Each scheduler in turn places its workloads; the next starts once the previous one's pods and claims are gone.
    ``timeout``: how long to wait for pods to be placed (all of them, or what can be)."""
    results: dict[str, Placed] = {}
    try:
        for scheduler in SCHEDULERS:
            if scheduler == "gpusched":
                scenario.start_gpusched()
            mine = workloads(scheduler)
            results[scheduler] = _run(k, scheduler, mine, timeout)
            for namespace in mine:
                for pod in k.pods(namespace):
                    path = kube_mod.Kube.pods_path(namespace, pod["metadata"]["name"])
                    k.request("DELETE", path, query={"gracePeriodSeconds": "0"})
            kube_mod.wait_until(
                lambda ns=list(mine): not any(claims(k, n) for n in ns),
                timeout=90,
                what=f"the claims of {scheduler}'s pods gone",
            )
    finally:
        for replica in scenario.schedulers:
            print(f"\n----- {replica.identity} -----\n{replica.log_tail(40)}")
        scenario.cleanup()
    for scheduler, placed in results.items():
        print(f"\n[side by side] {scheduler}: {placed}")
    return results
