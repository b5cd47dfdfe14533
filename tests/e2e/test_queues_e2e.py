"""Queues through ``gpusched run``: a limit caps a queue, idle capacity is borrowed, and a queue below its
guarantee takes it back by preempting the borrower's pods."""

from __future__ import annotations

import kube as kube_mod
import pytest
from kube import Scenario, node_of

pytestmark = pytest.mark.e2e


def _live(sched: Scenario, queue: str) -> list[dict[str, object]]:
    """The queue's pods that hold a node and are not being deleted."""
    return [
        p
        for p in sched.pods(f"{kube_mod.LABEL_QUEUE}={queue}")
        if node_of(p) and not p["metadata"].get("deletionTimestamp")
    ]


def test_queue_limit_caps_what_it_holds(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("cap-0"), kube_mod.gpu_node("cap-1")])
    capped = f"{sched.name}-capped"
    sched.create_queue(kube_mod.queue(capped, limit={"nvidia.com/gpu": "4"}))
    sched.start_gpusched()
    names = [f"capped-{i}" for i in range(6)]
    for name in names:
        sched.create_pod(kube_mod.pod(name, gpus=1, queue=capped))

    kube_mod.wait_until(lambda: len(_live(sched, capped)) == 4, timeout=60, what="4 pods of the capped queue bound")
    waiting = [n for n in names if not node_of(sched.pod(n))]
    assert len(waiting) == 2
    # 12 GPUs are still free: it is the limit, not the cluster, that holds the other two back.
    sched.stays_unbound(waiting, seconds=4)
    sched.wait_event(waiting[0], "FailedScheduling")


def test_borrowing_then_reclaim_by_preemption(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("share-0"), kube_mod.gpu_node("share-1")])
    team_a, team_b = f"{sched.name}-a", f"{sched.name}-b"
    sched.create_queue(kube_mod.queue(team_a, guaranteed={"nvidia.com/gpu": "8"}))
    sched.create_queue(kube_mod.queue(team_b, guaranteed={"nvidia.com/gpu": "8"}))
    sched.start_gpusched()

    # Team A is idle: team B borrows its guarantee and fills the cluster.
    b_names = [f"b-{i:02d}" for i in range(16)]
    for name in b_names:
        sched.create_pod(kube_mod.pod(name, gpus=1, queue=team_b))
    sched.wait_bound(b_names, timeout=90)

    # Team A comes back for its guarantee: 8 GPUs in pods of 2. Team B's borrowed pods are preempted.
    a_names = [f"a-{i}" for i in range(4)]
    for name in a_names:
        sched.create_pod(kube_mod.pod(name, gpus=2, queue=team_a))
    placed = sched.wait_bound(a_names, timeout=120)
    assert all(node_of(p) for p in placed)

    survivors = _live(sched, team_b)
    assert len(survivors) == 8, f"team B should keep exactly its guarantee: {kube_mod.summary(survivors)}"
    preempted = [n for n in b_names if n not in {p["metadata"]["name"] for p in survivors}]
    event = sched.wait_event(preempted[0], "Preempted")
    assert team_a in event["message"], event["message"]
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())
