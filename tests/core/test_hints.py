"""The queueing hints on a pod deletion: a waiting shared-GPU or MIG pod is woken only when what the deletion freed
can hold it, and never left waiting when it could run."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import dra_objects as dra
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events
from tests.core.test_preemption import _loop as preemption_loop
from tests.core.test_preemption import _pod as priority_pod
from tests.plugins.test_dra import DraCluster
from tests.plugins.test_dra_partitions import mig_cluster

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


def _loop(cluster: Cluster) -> tuple[SchedulingLoop, Clock]:
    clock = Clock()
    queue = SchedulingQueue(clock=clock, initial_backoff_s=0.0, max_backoff_s=0.0)
    return SchedulingLoop(cluster.scheduler, queue, clock=clock, events=Events()), clock


def _add(loop: SchedulingLoop, pod: api_pod.PodRequest) -> None:
    loop.pod_pending(pod)
    loop.run_until_idle()


def _delete(cluster: Cluster, loop: SchedulingLoop, key: str) -> None:
    """The API server deletes the running pod ``key``: the cache and the loop hear it, then the event."""
    cluster.cache.remove_pod(key)
    loop.pod_gone(key)
    loop.cluster_event("pod deleted")


def _waits(loop: SchedulingLoop, key: str) -> bool:
    """Whether ``key`` still waits in the unschedulable pool (not woken)."""
    return dict(loop.queue.pending()).get(key) == "unschedulable"


def _placed(cluster: Cluster) -> list[str]:
    return [d.pod.name for d in cluster.binder.decisions]


def test_a_shared_gpu_pod_is_woken_only_by_a_deletion_that_frees_its_share() -> None:
    cluster = Cluster([objects.node("n0", gpus=1)], ("fit", "gpu"))
    loop, _ = _loop(cluster)
    for name, milli in (("big", 600), ("small", 300)):
        _add(loop, api_pod.parse_pod(objects.pod(name, milli=milli)))
    _add(loop, api_pod.parse_pod(objects.pod("waiting", milli=500)))
    assert _waits(loop, "default/waiting")
    _delete(cluster, loop, "default/small")  # 400 milli free: not enough
    assert _waits(loop, "default/waiting")
    _delete(cluster, loop, "default/big")  # the whole GPU free
    assert not _waits(loop, "default/waiting")
    loop.run_until_idle()
    assert _placed(cluster)[-1] == "waiting"


def test_a_device_plugin_mig_pod_is_woken_only_when_its_profile_is_freed() -> None:
    node = objects.node("n0", extra={MIG_1G: "1", MIG_3G: "1"})
    cluster = Cluster([node], ("fit", "gpu"))
    loop, _ = _loop(cluster)
    _add(loop, api_pod.parse_pod(objects.pod("one", extra={MIG_1G: "1"})))
    _add(loop, api_pod.parse_pod(objects.pod("three", extra={MIG_3G: "1"})))
    _add(loop, api_pod.parse_pod(objects.pod("waiting", extra={MIG_3G: "1"})))
    assert _waits(loop, "default/waiting")
    _delete(cluster, loop, "default/one")  # a 1g instance frees nothing it can use
    assert _waits(loop, "default/waiting")
    _delete(cluster, loop, "default/three")
    assert not _waits(loop, "default/waiting")
    loop.run_until_idle()
    assert _placed(cluster)[-1] == "waiting"


def _claimed(cluster: DraCluster, name: str, profile: str) -> api_pod.PodRequest:
    cluster.claim(dra.claim(name, dra.mig_request(profile)))
    return cluster.pod(dra.with_claims(objects.pod(f"p-{name}"), name))


def test_a_dra_mig_claim_is_woken_only_when_its_gpu_has_the_slices_back() -> None:
    cluster = mig_cluster(gpus=1)  # one H100: seven compute slices
    loop, _ = _loop(cluster)
    for name, profile in (("four", "4g.40gb"), ("one-a", "1g.10gb"), ("one-b", "1g.10gb")):
        _add(loop, _claimed(cluster, name, profile))
    _add(loop, _claimed(cluster, "three", "3g.40gb"))
    assert _waits(loop, "default/p-three")
    cluster.scheduler.bind_failed("default/p-one-a")  # its claim's devices go back
    _delete(cluster, loop, "default/p-one-a")  # two compute slices free: a 3g needs three
    assert _waits(loop, "default/p-three")
    cluster.scheduler.bind_failed("default/p-one-b")
    _delete(cluster, loop, "default/p-one-b")
    assert not _waits(loop, "default/p-three")
    loop.run_until_idle()
    assert _placed(cluster)[-1] == "p-three"


def test_a_pod_that_may_preempt_is_woken_though_the_deletion_leaves_too_little_room() -> None:
    # The deletion frees one of the two it needs; preempting the low-priority pod frees the other.
    cluster, loop, clock, _, evictions = preemption_loop(("n0", 2))
    for pod in (priority_pod("low", 1, 0), priority_pod("high", 1, 10)):
        _add(loop, pod)
    _add(loop, priority_pod("waiting", 2, 5))
    assert _waits(loop, "default/waiting") and not evictions.pods
    _delete(cluster, loop, "default/high")
    assert not _waits(loop, "default/waiting")
    clock.now += 30.0
    loop.run_until_idle()
    assert [p.key for p in evictions.pods] == ["default/low"]


#: (whole GPUs, milli of one shared GPU): a shared share, one or two whole GPUs, CPU only.
_SHAPES = st.sampled_from([(0, 200), (0, 500), (0, 800), (1, 0), (2, 0), (0, 0)])


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    running=st.lists(_SHAPES, min_size=1, max_size=10),
    waiting=_SHAPES,
    order=st.randoms(use_true_random=False),
)
def test_a_deletion_the_hint_skips_never_lets_the_waiting_pod_fit(
    gpus: list[int], running: list[tuple[int, int]], waiting: tuple[int, int], order: Any
) -> None:
    # Running pods placed where the scheduler puts them, a pod waiting, then the running ones deleted in a random
    # order: whenever the hint keeps the pod waiting, a cycle run then would not place it either.
    nodes = [objects.node(f"n{i}", cpu="4", gpus=g) for i, g in enumerate(gpus)]
    cluster = Cluster(nodes, ("fit", "gpu"))
    loop, _ = _loop(cluster)
    names = []
    for i, (count, milli) in enumerate(running):
        if cluster.schedule(objects.pod(f"r{i}", gpus=count, milli=milli or None)).decision is not None:
            names.append(f"default/r{i}")
    pod = api_pod.parse_pod(objects.pod("w", gpus=waiting[0], milli=waiting[1] or None))
    _add(loop, pod)
    order.shuffle(names)
    for key in names:
        if not _waits(loop, "default/w"):
            break
        _delete(cluster, loop, key)
        if _waits(loop, "default/w"):
            # Skipped: the pod must not fit anywhere now.
            result = cluster.scheduler.schedule(pod)
            assert result.decision is None, f"skipped a wake-up after deleting {key}, yet it fits"


def _written(cluster: DraCluster, name: str, profile: str) -> None:
    """The claim ``name``'s allocation, as the scheduler's decision made it, is written (the watch shows it)."""
    decision = next(d for d in cluster.binder.decisions if d.pod.name == f"p-{name}")
    results = [
        {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
        for c in decision.claims
        if c.allocation is not None
        for d in c.allocation.devices
    ]
    raw = dra.claim(name, dra.mig_request(profile), allocation={"devices": {"results": results}})
    raw["metadata"]["resourceVersion"] = "2"
    cluster.claim(raw)


def _released(cluster: DraCluster, loop: SchedulingLoop, name: str) -> None:
    """The resourceclaim controller deletes the claim of a pod that left: its devices go back, a device change."""
    cluster.store.remove_claim(f"default/{name}")
    loop.cluster_event("device changed")


def test_a_dra_mig_claim_waits_through_a_deletion_for_its_claims_release() -> None:
    # As kube-scheduler's DRA plugin registers no pod deletion: the pod that leaves frees its devices only when its
    # claim lets them go, so the waiting pod is not tried (and refused, and backed off) in between.
    # Two 3g claims take the H100's eight memory slices and six of its seven compute slices: its share has room for a
    # 1g claim, its slices none (the DRA plugin alone refuses it).
    cluster = mig_cluster(gpus=1)
    loop, _ = _loop(cluster)
    for name in ("three-a", "three-b"):
        _add(loop, _claimed(cluster, name, "3g.40gb"))
        _written(cluster, name, "3g.40gb")
    _add(loop, _claimed(cluster, "one", "1g.10gb"))
    assert _waits(loop, "default/p-one")
    _delete(cluster, loop, "default/p-three-b")
    assert _waits(loop, "default/p-one")
    assert cluster.scheduler.schedule(_claimed(cluster, "one", "1g.10gb")).decision is None  # the claim holds them
    _released(cluster, loop, "three-b")
    assert not _waits(loop, "default/p-one")
    loop.run_until_idle()
    assert _placed(cluster)[-1] == "p-one"


_PROFILES = st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"])


@settings(max_examples=40, deadline=None)
@given(
    running=st.lists(st.tuples(_PROFILES, st.booleans()), min_size=1, max_size=8),
    waiting=_PROFILES,
    order=st.randoms(use_true_random=False),
)
def test_a_dra_deletion_or_release_the_hint_skips_never_lets_the_waiting_claim_fit(
    running: list[tuple[str, bool]], waiting: str, order: Any
) -> None:
    # MIG claims placed on two H100s, written or only assumed (the binding under way), a claim waiting; then each
    # running pod deleted in a random order, and its claim released after (a written one) or with it (an assumed
    # one): whenever the hint keeps the claim waiting, a cycle run then would not place it either.
    cluster = mig_cluster(gpus=2)
    loop, _ = _loop(cluster)
    placed = []
    for i, (profile, written) in enumerate(running):
        _add(loop, _claimed(cluster, f"r{i}", profile))
        if _placed(cluster)[-1:] == [f"p-r{i}"]:
            if written:
                _written(cluster, f"r{i}", profile)
            placed.append((f"r{i}", written))
    _add(loop, _claimed(cluster, "w", waiting))
    order.shuffle(placed)
    steps = []
    for name, written in placed:
        steps.append(lambda name=name, written=written: _leave(cluster, loop, name, written=written))
        if written:
            steps.append(lambda name=name: _released(cluster, loop, name))
    for step in steps:
        if not _waits(loop, "default/p-w"):
            break
        step()
        if _waits(loop, "default/p-w"):
            result = cluster.scheduler.schedule(cluster.pod(dra.with_claims(objects.pod("p-w"), "w")))
            assert result.decision is None, "skipped a wake-up, yet the waiting claim fits"


def _leave(cluster: DraCluster, loop: SchedulingLoop, name: str, *, written: bool) -> None:
    """Pod ``p-<name>`` is deleted; an allocation only assumed for it (its claim not written) goes with it."""
    if not written:
        cluster.scheduler.bind_failed(f"default/p-{name}")
    _delete(cluster, loop, f"default/p-{name}")
