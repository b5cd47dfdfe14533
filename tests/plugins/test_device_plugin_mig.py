"""MIG through NVIDIA's device plugin (the GPU Operator's), without DRA: placed as kube-scheduler places the
resources the plugin publishes, counted in queues as the share of a GPU each MIG device is, and not mistaken for
whole GPUs by FGD.

Mixed strategy: every profile is an extended resource of its own (``nvidia.com/mig-1g.10gb``). Single strategy:
the node's ``nvidia.com/gpu`` are MIG devices, said by its labels (``nvidia.com/mig.strategy=single``, the profile at
the end of ``nvidia.com/gpu.product``)."""

from __future__ import annotations

import pytest

from scheduler.api.crds.queue import QueueSpec
from scheduler.api.devices import nvidia_gpus
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

H100 = "NVIDIA-H100-80GB-HBM3"
A100_1G = "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
SINGLE = {"nvidia.com/mig.strategy": "single"}


def _mixed(name: str, **profiles: str) -> dict[str, object]:
    """A mixed-strategy node of H100s cut into MIG devices: no ``nvidia.com/gpu``, one resource per profile."""
    extra = {f"nvidia.com/mig-{p.replace('_', '.')}": n for p, n in profiles.items()}
    return objects.node(name, cpu="64", product=H100, extra=extra, labels={"nvidia.com/mig.strategy": "mixed"})


def _single(name: str, devices: int = 14) -> dict[str, object]:
    """A single-strategy node of 2 A100-40GB cut in 7 x 1g.5gb: its ``nvidia.com/gpu`` are the 14 MIG devices."""
    return objects.node(name, cpu="64", gpus=devices, gpu_memory_mib="4864", product=A100_1G, labels=SINGLE)


def _loop(cluster: Cluster) -> SchedulingLoop:
    clock = Clock()
    return SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())


def _mig_pod(name: str, profile: str = "1g.10gb", count: int = 1, queue: str = "") -> api_pod.PodRequest:
    labels = {"gpusched.io/queue": queue} if queue else {}
    return api_pod.parse_pod(objects.pod(name, extra={f"nvidia.com/mig-{profile}": str(count)}, labels=labels))


def _gpu_pod(name: str, gpus: int = 1, queue: str = "", **kwargs: object) -> api_pod.PodRequest:
    labels = {"gpusched.io/queue": queue} if queue else {}
    return api_pod.parse_pod(objects.pod(name, gpus=gpus, labels=labels, **kwargs))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("resource", "milli"),
    [
        ("nvidia.com/mig-1g.10gb", 142),
        ("nvidia.com/mig-2g.20gb", 285),
        ("nvidia.com/mig-3g.40gb", 428),
        ("nvidia.com/mig-4g.40gb", 571),
        ("nvidia.com/mig-7g.80gb", 1000),
        ("nvidia.com/mig-1g.5gb", 142),
        ("nvidia.com/mig-2g.12gb", 500),  # a profile only the A30 has: 2 of its 4 compute slices
        ("nvidia.com/mig-mystery", 0),
        ("nvidia.com/gpu", 0),
        ("example.com/mig-1g.10gb", 0),
    ],
)
def test_a_device_plugin_mig_resource_is_its_compute_slices_of_a_gpu(resource: str, milli: int) -> None:
    assert nvidia_gpus.device_plugin_mig_milli(resource) == milli


def test_the_single_strategy_is_read_from_the_node_labels() -> None:
    single = api_node.parse_node(_single("s"))
    assert (single.gpus, single.mig_profile, single.mig_milli) == (14, "1g.5gb", 142)
    assert single.gpu_model == A100_1G  # gpusched.io/gpu-model matches the product label as it is
    # The label alone does not make MIG devices: a single-strategy node whose GPUs are not cut has whole GPUs, and a
    # MIG product without the single strategy (mixed: the product is the GPU's) says nothing of nvidia.com/gpu.
    whole = api_node.parse_node(objects.node("w", gpus=8, product="NVIDIA-A100-SXM4-40GB", labels=SINGLE))
    assert (whole.mig_profile, whole.mig_milli) == ("", 1000)
    mixed = api_node.parse_node(objects.node("m", gpus=8, product=A100_1G, labels={"nvidia.com/mig.strategy": "mixed"}))
    assert mixed.mig_profile == ""
    a30 = api_node.parse_node(objects.node("a30", gpus=4, product="NVIDIA-A30-MIG-1g.6gb", labels=SINGLE))
    assert (a30.mig_profile, a30.mig_milli) == ("1g.6gb", 250)


def test_mixed_strategy_pods_are_placed_as_extended_resources_and_counted_as_their_share_of_a_gpu() -> None:
    cluster = Cluster([_mixed("mig-0", **{"1g_10gb": "7", "3g_40gb": "2"}), objects.node("cpu", cpu="64")])
    loop = _loop(cluster)
    loop.queues_changed([QueueSpec(name="team")])
    for i in range(7):
        loop.pod_pending(_mig_pod(f"small{i}", queue="team"))
    loop.pod_pending(_mig_pod("big", "3g.40gb", count=2, queue="team"))
    loop.pod_pending(_mig_pod("one-too-many", queue="team"))
    loop.run_until_idle()
    placed = {d.pod.name: d.node for d in cluster.binder.decisions}
    # Seven 1g devices for eight pods asking one: one waits, whichever it is.
    assert set(placed.values()) == {"mig-0"} and len(placed) == 8 and "big" in placed
    # No device is chosen (the device plugin does): no GPU ids.
    assert all(d.gpu_ids == () for d in cluster.binder.decisions)
    message = cluster.schedule(objects.pod("late", extra={"nvidia.com/mig-1g.10gb": "1"})).status.message
    assert message == "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb."
    status = loop.queue_statuses()["team"]
    # 7 x 1g (142) + 2 x 3g (428): 1.85 GPU, and each profile under its own name too.
    assert status.allocated["nvidia.com/gpu"] == pytest.approx(1.85)
    assert status.allocated["nvidia.com/mig-1g.10gb"] == 7.0
    assert status.allocated["nvidia.com/mig-3g.40gb"] == 2.0
    # The cluster's GPUs are the MIG devices' shares: 0.994 + 0.856.
    assert loop.tenancy.capacity()["nvidia.com/gpu"] == pytest.approx(1.85)


def test_a_queues_gpu_limit_counts_mig_devices_by_their_share() -> None:
    cluster = Cluster([_mixed("mig-0", **{"3g_40gb": "4", "1g_10gb": "4"})])
    loop = _loop(cluster)
    loop.queues_changed([QueueSpec(name="team", limit={"nvidia.com/gpu": 1.0})])
    for name, profile in (("a", "3g.40gb"), ("b", "3g.40gb"), ("c", "1g.10gb"), ("d", "1g.10gb")):
        loop.pod_pending(_mig_pod(name, profile, queue="team"))
    loop.run_until_idle()
    # 428 + 428 + 142 = 998 milli: the second 1g would cross the 1-GPU limit and waits.
    assert sorted(d.pod.name for d in cluster.binder.decisions) == ["a", "b", "c"]


def test_single_strategy_nodes_hold_gpu_pods_by_count_and_queues_count_each_device_as_its_share() -> None:
    cluster = Cluster([_single("mig-0"), objects.node("h100", cpu="64", gpus=8, product=H100)], ("fit", "gpu", "fgd"))
    loop = _loop(cluster)
    loop.queues_changed([QueueSpec(name="team")])
    for i in range(7):
        # Only the MIG node: a node selector, or the model named by its MIG profile.
        loop.pod_pending(_gpu_pod(f"s{i}", 2, queue="team", models="MIG-1g.5gb"))
    loop.run_until_idle()
    placed = {d.pod.name: d for d in cluster.binder.decisions}
    assert {d.node for d in placed.values()} == {"mig-0"} and len(placed) == 7
    assert all(d.gpu_ids == () for d in placed.values())  # the device plugin picks the MIG devices
    status = loop.queue_statuses()["team"]
    assert status.allocated["nvidia.com/gpu"] == pytest.approx(14 * 0.142)
    assert loop.tenancy.capacity()["nvidia.com/gpu"] == pytest.approx(8 + 14 * 0.142)
    # Full by count: 14 devices held, the next pod asking one fits nowhere the model allows.
    message = cluster.schedule(objects.pod("late", gpus=1, models="MIG-1g.5gb")).status.message
    assert message.startswith("0/2 nodes are available:"), message
    assert "1 Insufficient nvidia.com/gpu" in message


def test_a_shared_gpu_never_shares_a_mig_device_of_a_single_strategy_node() -> None:
    # Its device plugin gives each pod asking nvidia.com/gpu: 1 a device of its own: two half-GPU pods on one slot
    # would take two devices.
    cluster = Cluster([_single("mig-0", devices=1)])
    message = cluster.schedule(objects.pod("half", milli=500)).status.message
    assert message.startswith("0/1 nodes are available: 1"), message
    assert "mig-0" not in {d.node for d in cluster.binder.decisions}


def test_fgd_prefers_whole_gpus_for_a_gpu_pod_and_is_not_confused_by_mig_nodes() -> None:
    # FGD scores GPU slots: a single-strategy node's 7 MIG devices (one A100 cut in 7) are no idle whole GPUs (FGD
    # sent the pod there, to a 1g.5gb, as filling the node's GPUs left less idle), and a mixed node with MIG
    # resources and no nvidia.com/gpu has no GPU slot at all.
    nodes = [_single("mig-single", devices=7), _mixed("mig-mixed", **{"1g_10gb": "7"}), objects.node("h100", gpus=8)]
    cluster = Cluster(nodes, ("fit", "gpu", "fgd"))
    assert cluster.place(objects.pod("one-gpu", gpus=1))[0] == "h100"
    assert cluster.place(objects.pod("mig", extra={"nvidia.com/mig-1g.10gb": "1"}))[0] == "mig-mixed"
    # The held MIG pod is no GPU pod to FGD's typical pods, and CPU pods still go where they fit.
    assert cluster.place(objects.pod("cpu-only", cpu="2"))[0] in {"mig-single", "mig-mixed", "h100"}
    slot = cluster.cache.slot_of("mig-mixed")
    assert slot is not None and int(cluster.cache.arrays.gpu_count[slot]) == 0


@pytest.mark.parametrize(
    ("selector", "models", "milli"),
    [
        ({"nvidia.com/gpu.product": A100_1G}, (), 142),
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"}, (), 428),
        ({}, ("MIG-1g.5gb",), 142),
        ({}, ("MIG-1g.5gb", "MIG-2g.10gb"), 285),  # the largest it may get
        ({}, ("MIG-1g.5gb", "H100"), 0),  # it may get a whole H100
        ({}, ("A100",), 0),
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, (), 0),
    ],
)
def test_a_pending_pod_kept_to_mig_devices_says_so_by_its_selector_or_models(
    selector: dict[str, str], models: tuple[str, ...], milli: int
) -> None:
    assert nvidia_gpus.asked_single_strategy_milli(selector, models) == milli


def test_a_queues_gpu_limit_lets_single_strategy_pods_in_by_their_share_before_they_are_placed() -> None:
    # Seven 1g.5gb pods are 0.994 GPU: a queue limited to 1 GPU runs them all, although each asks nvidia.com/gpu: 1
    # (before placement it is counted by what its node selector keeps it to, not as the whole GPU it cannot get).
    cluster = Cluster([_single("mig-0"), objects.node("h100", cpu="64", gpus=8, product=H100)])
    loop = _loop(cluster)
    loop.queues_changed([QueueSpec(name="team", limit={"nvidia.com/gpu": 1.0})])
    selector = {"nvidia.com/gpu.product": A100_1G}
    for i in range(8):
        loop.pod_pending(_gpu_pod(f"s{i}", 1, queue="team", node_selector=selector))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 7
    assert loop.queue_statuses()["team"].allocated["nvidia.com/gpu"] == pytest.approx(0.994)


def test_a_pod_found_bound_on_a_single_strategy_node_counts_its_devices_share_after_a_restart() -> None:
    raw = objects.pod("s", gpus=2, node_name="mig-0", labels={"gpusched.io/queue": "team"}, phase="Running")
    cluster = Cluster([_single("mig-0")], bound=[raw])
    loop = _loop(cluster)
    loop.queues_changed([QueueSpec(name="team")])
    loop.pod_placed(api_pod.parse_pod(raw))
    assert loop.queue_statuses()["team"].allocated["nvidia.com/gpu"] == pytest.approx(0.284)
    # It holds two of the node's 14 devices: twelve more pods of one fit, not thirteen.
    for i in range(13):
        loop.pod_pending(_gpu_pod(f"p{i}", 1, queue="team"))
    loop.run_until_idle()
    assert len(cluster.binder.decisions) == 12
