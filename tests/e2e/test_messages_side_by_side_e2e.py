"""FailedScheduling as kube-scheduler writes it (issue 46): the stock kube-scheduler and ``gpusched run`` on one local
control plane, one after the other, each told about the same pod that no node holds and no preemption helps, for
each of the reasons DefaultPreemption counts. Only ``schedulerName`` and the namespace differ; the messages must be
the same, the ``preemption: ...`` part included.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e import side_by_side
from tests.e2e.localcluster import APIError

pytestmark = pytest.mark.e2e

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
LOW, HIGH = "msg-low", "msg-high"


#: Node name -> CPUs.
NODES = {"msg-0": "4", "msg-1": "4", "msg-2": "2"}
#: Pods placed first: on msg-0 one of the preemptor's priority (nothing to evict there), on msg-1 a lower one whose
#: eviction frees too little next to one of the preemptor's priority; msg-2 is smaller than the preemptor even empty.
SETUP = ("peer", "web", "mid")


def _pods(scheduler: str) -> list[dict[str, Any]]:
    def made(name: str, cpu: str, priority: str, node: str | None) -> dict[str, Any]:
        selector = {"kubernetes.io/hostname": node} if node else None
        return kube_mod.pod(name, cpu=cpu, priority_class=priority, node_selector=selector, scheduler_name=scheduler)

    return [
        made("peer", "2", HIGH, "msg-0"),
        made("web", "1", LOW, "msg-1"),
        made("mid", "2", HIGH, "msg-1"),
        made("urgent", "3", HIGH, None),
    ]


def _failed_scheduling(k: kube_mod.Kube, namespace: str, timeout: float = 60.0) -> str:
    def said() -> str | None:
        for event in k.events(namespace, name="urgent"):
            if event.get("reason") == "FailedScheduling":
                return str(event.get("message") or event.get("note") or "")
        return None

    message: str = kube_mod.wait_until(said, timeout=timeout, what=f"urgent's FailedScheduling in {namespace}")
    return message


def test_a_pod_no_preemption_helps_is_told_as_kube_scheduler_tells_it(
    tmp_path: Path, gpusched_missing: str | None
) -> None:
    said: dict[str, str] = {}
    with side_by_side.control_plane(tmp_path, gpusched_missing) as (k, scenario):
        scenario.add_nodes([kube_mod.gpu_node(name, gpus=0, cpu=cpu, memory="8Gi") for name, cpu in NODES.items()])
        # Ready is not enough: the node controller takes the node.kubernetes.io/not-ready taint off a moment later.
        # kube-scheduler, which goes first, once counted "1 node(s) had untolerated taint(s)" where gpusched, later,
        # counted none: the two were not told of the same cluster.
        kube_mod.wait_until(
            lambda: (
                not any(
                    t.get("key", "").startswith("node.kubernetes.io/")
                    for n in scenario.my_nodes()
                    for t in (n.get("spec", {}).get("taints") or [])
                )
            ),
            timeout=60,
            what="the nodes' not-ready taints taken off",
        )
        for name, value in ((LOW, 10), (HIGH, 1000)):
            body = {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": name}, "value": value}
            k.request("POST", PRIORITY_CLASSES, body)
        try:
            for scheduler in side_by_side.SCHEDULERS:
                if scheduler == "gpusched":
                    scenario.start_gpusched()
                namespace = f"msg-{scheduler}"
                k.ensure_namespace(namespace)
                pods = _pods(scheduler)
                for pod in pods[: len(SETUP)]:
                    k.request("POST", kube_mod.Kube.pods_path(namespace), pod)
                kube_mod.wait_until(
                    lambda ns=namespace: all(kube_mod.node_of(k.pod(ns, n)) for n in SETUP),
                    timeout=60,
                    what=f"{scheduler}'s {', '.join(SETUP)} bound",
                )
                k.request("POST", kube_mod.Kube.pods_path(namespace), pods[-1])
                said[scheduler] = _failed_scheduling(k, namespace)
                for pod in pods:
                    with contextlib.suppress(APIError):
                        path = kube_mod.Kube.pods_path(namespace, pod["metadata"]["name"])
                        k.request("DELETE", path, query={"gracePeriodSeconds": "0"})
                kube_mod.wait_until(lambda ns=namespace: not k.pods(ns), timeout=60, what=f"{scheduler}'s pods gone")
                time.sleep(1.0)  # the nodes' room freed in the next scheduler's cache too
        finally:
            for replica in scenario.schedulers:
                print(f"\n----- {replica.identity} -----\n{replica.log_tail(40)}")
            scenario.cleanup()
            for name in (LOW, HIGH):
                with contextlib.suppress(APIError):
                    k.request("DELETE", f"{PRIORITY_CLASSES}/{name}")
    print(f"\n[side by side] {said}")
    kube_said = said["default-scheduler"]
    # kube-scheduler's PostFilter counted each kind of node: the comparison means something.
    for reason in ("Insufficient cpu", "No preemption victims found", "Preemption is not helpful"):
        assert "preemption: 0/3 nodes are available: " in kube_said and f"1 {reason}" in kube_said, said
    assert said["gpusched"] == kube_said, said
