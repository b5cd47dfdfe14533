"""Queues through ``gpusched run``: a limit caps a queue, idle capacity is borrowed, and a queue below its
guarantee takes it back by preempting the borrower's pods."""

from __future__ import annotations

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of

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


def _pod_told(sched: Scenario, name: str, words: str) -> str:
    """The message of pod ``name``'s PodScheduled=False condition, once it says ``words``."""

    def told() -> str | None:
        condition = kube_mod.condition(sched.pod(name), "PodScheduled") or {}
        message = str(condition.get("message") or "")
        return message if condition.get("status") == "False" and words in message else None

    found: str = kube_mod.wait_until(told, timeout=30, what=f"pod {name} PodScheduled=False: {words!r}")
    return found


def test_queue_states_as_kubectl_shows_them(sched: Scenario) -> None:
    """A queue that exists but is not accepted (its parent is missing) is named as such to its pods, with its
    reason; a PodGroup of a missing queue carries the condition itself (REASON column); `kubectl get gq` shows
    ACCEPTED and "none" for no limit by default."""
    ns = sched.namespace
    orphan, ghost, capped, open_ = (f"{ns}-orphan", f"{ns}-ghost", f"{ns}-capped", f"{ns}-open")
    sched.add_nodes([kube_mod.gpu_node("qs-0")])
    sched.create_queue(kube_mod.queue(orphan, parent=f"{ns}-no-such-parent"))
    sched.create_queue(kube_mod.queue(capped, limit={"nvidia.com/gpu": "4"}))
    sched.create_queue(kube_mod.queue(open_))
    sched.start_gpusched()

    sched.create_pod(kube_mod.pod("lost", gpus=1, queue=orphan))
    told = _pod_told(sched, "lost", f"queue '{orphan}' is not accepted")
    assert f"its parent queue '{ns}-no-such-parent' does not exist" in told, told
    assert "does not exist; waiting for it" not in told, told
    sched.wait_event("lost", "QueueNotAccepted")

    sched.create_podgroup(kube_mod.podgroup("gang", min_member=2, queue=ghost))
    for i in range(2):
        sched.create_pod(kube_mod.pod(f"gang-{i}", gpus=1, group="gang"))
    _pod_told(sched, "gang-0", f"queue '{ghost}' does not exist")

    def group_reason() -> str | None:
        out = sched.kube.kubectl("get", "podgroup", "gang", "-n", ns, "-o", "wide").stdout
        return out if "QueueNotFound" in out else None

    table = kube_mod.wait_until(group_reason, timeout=30, what="the PodGroup's REASON column says QueueNotFound")
    assert "REASON" in table.splitlines()[0], table

    def queues_shown() -> str | None:
        out = sched.kube.kubectl("get", "gq", orphan, capped, open_).stdout
        rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
        ready = rows.get(orphan, [""])[1:2] == ["False"] and rows.get(open_, [""])[1:2] == ["True"]
        return out if ready and "none" in rows.get(open_, []) else None

    shown = kube_mod.wait_until(queues_shown, timeout=30, what="kubectl get gq shows ACCEPTED and LIMIT")
    header = shown.splitlines()[0].split()
    assert header[:2] == ["NAME", "ACCEPTED"], shown
    rows = {line.split()[0]: line.split() for line in shown.splitlines()[1:]}
    assert rows[capped][1:2] == ["True"] and "4" in rows[capped][2:4], shown  # its limit, not "none"
    assert rows[open_][1:3] == ["True", "none"], shown  # no guarantee (blank), no limit: "none"
