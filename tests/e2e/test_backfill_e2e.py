"""Holds for the head of the line and backfill on a real API server, through ``gpusched run`` (issue 43): two kwok
nodes of 8 GPUs, one running a pod of 6 GPUs with ``activeDeadlineSeconds`` (it frees first), the other a pod of 8
GPUs that declares no run time. An 8-GPU pod that fits nowhere holds the node that frees first and is told so (an
Event with its expected start); a 2-GPU pod whose deadline ends before that start backfills the held room; a 2-GPU
pod that declares no run time waits; once the pods on the held node end, the 8-GPU pod binds there. kwok does not
end a pod at its deadline: the test deletes the pods whose time is up, as the kubelet would end them. See
docs/backfill.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of

pytestmark = pytest.mark.e2e

BACKFILLING = {"profile": {"actions": ["allocate", "reclaim", "preempt", "backfill"]}}
NODES = ("bf-0", "bf-1")


def _pod(name: str, gpus: int, deadline: int | None = None) -> dict[str, Any]:
    manifest = kube_mod.pod(name, gpus=gpus)
    if deadline is not None:
        manifest["spec"]["activeDeadlineSeconds"] = deadline
    return manifest


def test_a_held_job_starts_when_the_short_pods_end_while_a_pod_that_ends_in_time_backfills(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node(n, gpus=8) for n in NODES])
    sched.start_gpusched(config=BACKFILLING)
    sched.create_pod(_pod("short", 6, deadline=3600))
    (short,) = sched.wait_bound(["short"])
    sched.create_pod(_pod("untimed-8", 8))
    (other,) = sched.wait_bound(["untimed-8"])
    assert node_of(other) != node_of(short)

    sched.create_pod(_pod("big", 8, deadline=7200))
    told = sched.wait_event("big", "HoldingRoom")["message"]
    assert f"holding 8 GPUs on node {node_of(short)} for this job; expected start in" in told, told

    sched.create_pod(_pod("quick", 2, deadline=600))  # gone long before the short pod's hour is up
    (quick,) = sched.wait_bound(["quick"])
    assert node_of(quick) == node_of(short)
    sched.create_pod(_pod("untimed-2", 2))  # declares no run time: may not use the held room
    sched.stays_unbound(["big", "untimed-2"], 5)

    # Their time is up: the kubelet would end them (kwok does not).
    sched.delete_pod("short")
    sched.delete_pod("quick")
    (big,) = sched.wait_bound(["big"])
    assert node_of(big) == node_of(short)
    sched.stays_unbound(["untimed-2"], 3)
