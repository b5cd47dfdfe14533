"""``gpusched run`` under crashes: SIGKILL mid-burst and mid-gang, restarts that must honour the GPU ids already
given out, two replicas with leader election, and the API server restarted under load.

What must hold after each of these, as a user would check it: every pod is bound at most once and stays where
it was bound, no node holds more GPUs than it has and no GPU id is handed to two pods, no gang is left partial.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, gpu_ids_of, node_of

pytestmark = pytest.mark.e2e

#: Short leases so that a failover takes seconds, not the default 15.
FAST_LEASE = {"leaderElection": {"leaseDurationSeconds": 4, "renewDeadlineSeconds": 3, "retryPeriodSeconds": 1}}


def _bound_names(sched: Scenario) -> dict[str, str]:
    return {p["metadata"]["name"]: node_of(p) for p in sched.pods() if node_of(p)}


def _metric(text: str, name: str) -> float:
    """The sum of a metric's samples in a Prometheus text page (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if re.match(rf"{re.escape(name)}(\{{.*\}})? ", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _binds(replica: kube_mod.Gpusched) -> float:
    return _metric(replica.metrics(), "gpusched_binds_total")


def test_gpu_ids_are_annotated_and_honoured_after_a_restart(sched: Scenario) -> None:
    sched.add_node(kube_mod.gpu_node("ids-0"))
    replica = sched.start_gpusched()
    first = [f"before-{i}" for i in range(3)]
    for name in first:
        sched.create_pod(kube_mod.pod(name, gpus=2))
    before = sched.wait_bound(first)
    taken = [i for p in before for i in gpu_ids_of(p)]
    assert len(taken) == 6 and len(set(taken)) == 6, kube_mod.summary(before)

    replica.kill()
    replica.start().wait_ready().wait_leader()
    sched.create_pod(kube_mod.pod("after", gpus=2))
    (after,) = sched.wait_bound(["after"])
    assert not set(gpu_ids_of(after)) & set(taken), f"restarted scheduler reused GPU ids: {kube_mod.summary([after])}"
    assert sorted(taken + list(gpu_ids_of(after))) == list(range(8))
    # The node is full now, by the annotations the restarted scheduler read back.
    sched.create_pod(kube_mod.pod("no-room", gpus=1))
    sched.wait_event("no-room", "FailedScheduling")
    assert [p["metadata"]["name"] for p in before] == first  # nothing moved
    assert all(node_of(sched.pod(n)) == "ids-0" for n in first)


def test_kill_mid_burst_then_restart(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node(f"burst-{i}") for i in range(4)])
    replica = sched.start_gpusched()
    names = [f"burst-{i:02d}" for i in range(40)]  # 40 one-GPU pods for 32 GPUs
    for name in names:
        sched.create_pod(kube_mod.pod(name, gpus=1))
    kube_mod.wait_until(lambda: len(_bound_names(sched)) >= 4, timeout=60, what="a few pods bound")
    replica.kill()
    at_kill = _bound_names(sched)

    replica.start().wait_ready().wait_leader()
    kube_mod.wait_until(
        lambda: len(_bound_names(sched)) == 32, timeout=120, what="32 pods bound", describe=sched.describe
    )
    time.sleep(2)  # anything still in flight would show now
    final = _bound_names(sched)
    assert len(final) == 32
    assert all(final[n] == node for n, node in at_kill.items()), "a pod bound before the kill moved"
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())


def test_kill_mid_gang_then_restart(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node(f"gkill-{i}") for i in range(4)])
    replica = sched.start_gpusched()
    groups = [f"job-{g}" for g in range(6)]  # six gangs of 4 x 4 GPUs; 32 GPUs hold two of them
    for group in groups:
        sched.create_podgroup(kube_mod.podgroup(group, min_member=4))
    for group in groups:
        for m in range(4):
            sched.create_pod(kube_mod.pod(f"{group}-{m}", gpus=4, group=group))
    kube_mod.wait_until(lambda: _bound_names(sched), timeout=60, what="the first gang member bound", interval=0.05)
    replica.kill()

    replica.start().wait_ready().wait_leader()

    def per_group() -> dict[str, int]:
        counts = dict.fromkeys(groups, 0)
        for p in sched.pods():
            if node_of(p):
                counts[p["metadata"]["labels"][kube_mod.LABEL_POD_GROUP]] += 1
        return counts

    kube_mod.wait_until(
        lambda: sorted(per_group().values())[-2:] == [4, 4], timeout=120, what="two gangs complete", describe=per_group
    )
    time.sleep(3)
    counts = per_group()
    assert sorted(counts.values()) == [0, 0, 0, 0, 4, 4], f"a gang left partial: {counts}"
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())


def test_two_replicas_only_the_leader_binds_and_the_standby_takes_over(sched: Scenario) -> None:
    sched.add_nodes([kube_mod.gpu_node("ha-0"), kube_mod.gpu_node("ha-1")])
    first = sched.gpusched("replica-a", config=FAST_LEASE).start()
    second = sched.gpusched("replica-b", config=FAST_LEASE).start()
    first.wait_ready()
    second.wait_ready()  # a standby keeps a warm cache, so it is ready too
    leader = kube_mod.wait_until(
        lambda: [r for r in (first, second) if r.is_leader()], timeout=60, what="one replica leading"
    )
    assert len(leader) == 1, "two replicas lead at once"
    (leader_replica,) = leader
    standby = second if leader_replica is first else first
    assert not standby.is_leader()

    before = [f"ha-before-{i}" for i in range(6)]
    for name in before:
        sched.create_pod(kube_mod.pod(name, gpus=1))
    sched.wait_bound(before)
    assert _binds(leader_replica) >= 6
    assert _binds(standby) == 0, "the standby bound pods"
    assert _metric(standby.metrics(), "gpusched_is_leader") == 0
    # Metrics once: the standby's warm cache is not exported, so a sum over both replicas counts each GPU once.
    total = 'gpusched_cluster_gpus{state="total"}'
    assert "gpusched_cluster_gpus" not in standby.metrics()
    assert _metric(leader_replica.metrics(), total) >= 16  # ha-0 and ha-1, and whatever other nodes the cluster has

    leader_replica.kill()
    standby.wait_leader(timeout=30)
    after = [f"ha-after-{i}" for i in range(6)]
    for name in after:
        sched.create_pod(kube_mod.pod(name, gpus=1))
    sched.wait_bound(after)
    assert _binds(standby) >= 6
    assert _metric(standby.metrics(), "gpusched_is_leader") == 1
    assert _metric(standby.metrics(), total) >= 16  # the new leader exports the cluster
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())


def test_api_server_restarted_under_load(sched: Scenario) -> None:
    if sched.kube.local is None:
        pytest.skip("restarting the API server needs the suite's own control plane (not GPUSCHED_E2E_KUBECONFIG)")
    sched.add_nodes([kube_mod.gpu_node(f"apirestart-{i}") for i in range(4)])
    replica = sched.start_gpusched()
    first = [f"load-{i:02d}" for i in range(20)]
    for name in first:
        sched.create_pod(kube_mod.pod(name, gpus=1))
    kube_mod.wait_until(lambda: len(_bound_names(sched)) >= 3, timeout=60, what="a few pods bound")

    sched.kube.local.restart_apiserver(kill=True, downtime=2)
    # Pods created after the restart are seen only if the scheduler's watches came back.
    second = [f"late-{i:02d}" for i in range(12)]
    for name in second:
        sched.create_pod(kube_mod.pod(name, gpus=1))
    sched.wait_bound(first + second, timeout=120)
    assert replica.alive(), "gpusched exited when the API server went away"
    sched.create_pod(kube_mod.pod("overflow", gpus=1))
    sched.wait_event("overflow", "FailedScheduling")
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())
