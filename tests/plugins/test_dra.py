"""ResourceClaims as kube-scheduler's DynamicResources plugin handles them, with gpusched's device choice: which
nodes a pod with claims may go to, which devices each claim gets there (the tightest set, selectors, counts,
``All``, ``firstAvailable``, ``matchAttribute``, admin access, shared claims), that the whole GPUs among them are
the pod's GPUs, and that no device is given twice (across cycles, and inside a gang's what-if)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.basics.resources import GpuRequest
from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.devices import dra as api_dra
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects.pod import PodRequest
from scheduler.cache import dra_gpus
from scheduler.core import gang
from scheduler.core.cycle import Result
from scheduler.core.loop import SchedulingLoop
from scheduler.framework.interface import Code
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import dra_objects as dra
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

PLUGINS = ("fit", "gpu", "dra")


class DraCluster(Cluster):
    """The harness's cluster with DRA objects, and pods read as the operator reads them (GPUs from claims)."""

    def __init__(self, node_names: tuple[str, ...], *, plugins: tuple[str, ...] = PLUGINS, gpus: int = 8) -> None:
        super().__init__([objects.node(n) for n in node_names], plugins)
        self.store = self.cache.devices
        self.store.upsert_class(api_dra.parse_device_class(dra.gpu_class()))
        for n in node_names:
            self.slice(dra.gpu_slice(n, gpus))

    def slice(self, raw: dict[str, Any]) -> None:
        self.store.upsert_slice(api_dra.parse_resource_slice(raw))
        for node in self.cache.nodes.values():
            info = dataclasses.replace(node.info, gpus=0, gpu_memory=0, gpu_model="")
            self.cache.upsert_node(dra_gpus.with_gpus(info, self.store))

    def claim(self, raw: dict[str, Any]) -> None:
        self.store.upsert_claim(api_dra.parse_claim(raw))

    def pod(self, raw: dict[str, Any]) -> PodRequest:
        pod = api_pod.parse_pod(raw)
        gpu = dra_gpus.claim_gpu_request(self.store, pod)
        if gpu is not None and gpu.count:
            pod = dataclasses.replace(pod, gpu=gpu)
        return pod

    def schedule(self, raw: dict[str, Any]) -> Result:
        return self.scheduler.schedule(self.pod(raw))

    def devices(self, raw: dict[str, Any]) -> tuple[str, list[str], tuple[int, ...]]:
        result = self.schedule(raw)
        assert result.decision is not None, result.status.message
        names = [d.device for c in result.decision.claims for d in c.devices]
        return result.decision.node, names, result.decision.gpu_ids


def pod_with(name: str, *claims: str) -> dict[str, Any]:
    return dra.with_claims(objects.pod(name), *claims)


def test_a_claim_gets_the_tightest_free_gpus_and_they_are_the_pods_gpus() -> None:
    cluster = DraCluster(("a",))
    assert cluster.cache.nodes[0].info.gpus == 8  # the node's GPUs come from its ResourceSlice
    cluster.claim(dra.claim("one", dra.request(count=1)))
    cluster.claim(dra.claim("two", dra.request(count=2)))
    cluster.claim(dra.claim("four", dra.request(count=4)))
    assert cluster.devices(pod_with("p1", "one")) == ("a", ["gpu-0"], (0,))
    # Two GPUs: the PCIe root with 3 free (gpu-1..3) fits them and keeps the other root's 4 whole.
    assert cluster.devices(pod_with("p2", "two")) == ("a", ["gpu-1", "gpu-2"], (1, 2))
    # Four: only the untouched root has them together.
    _, names, ids = cluster.devices(pod_with("p4", "four"))
    assert names == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"] and ids == (4, 5, 6, 7)
    decision = cluster.binder.decisions[-1]
    (claim,) = decision.claims
    assert claim.claim == "default/four" and claim.allocation is not None and claim.allocation.node == "a"
    assert [d.request for d in claim.devices] == ["gpus"] * 4
    # The GPU arrays count them: one GPU left on the node, and a 2-GPU claim fits nowhere.
    assert cluster.free_devices("a").count(1000.0) == 1
    cluster.claim(dra.claim("two-more", dra.request(count=2)))
    result = cluster.schedule(pod_with("p5", "two-more"))
    assert result.decision is None
    assert result.status.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_no_device_is_given_twice_and_a_failed_binding_frees_them() -> None:
    cluster = DraCluster(("a",), gpus=2)
    cluster.claim(dra.claim("x", dra.request(count=2)))
    cluster.claim(dra.claim("y", dra.request(count=1)))
    assert cluster.devices(pod_with("px", "x"))[1] == ["gpu-0", "gpu-1"]
    assert set(cluster.store.taken()) == {(dra.DRIVER, "a", "gpu-0"), (dra.DRIVER, "a", "gpu-1")}
    assert cluster.schedule(pod_with("py", "y")).decision is None
    cluster.scheduler.bind_failed("default/px")
    assert not cluster.store.taken()
    assert cluster.devices(pod_with("py", "y"))[1] == ["gpu-0"]


def test_a_binding_confirmed_by_the_watch_keeps_the_devices_as_the_simulators_confirm_does() -> None:
    # The watch shows the pod on its node before it shows the claim's allocation; the pod is then deleted. The
    # devices belong to the claim (allocated in the API server) until the claim's watch says otherwise, whichever
    # way the binding was confirmed: by the simulator's binder (Cache.confirm) or by the watch (upsert_pod).
    for confirm in ("binder", "watch"):
        cluster = DraCluster(("a",), gpus=2)
        cluster.claim(dra.claim("x", dra.request(count=2)))
        _, names, ids = cluster.devices(pod_with("px", "x"))
        if confirm == "binder":
            cluster.cache.confirm("default/px")
        else:
            annotations = {"gpusched.io/gpu-ids": ",".join(str(i) for i in ids)}
            raw = dra.with_claims(objects.pod("px", node_name="a", annotations=annotations), "x")
            cluster.cache.upsert_pod(cluster.pod(raw))
            assert not cluster.cache.is_assumed("default/px")
        cluster.cache.remove_pod("default/px")
        assert sorted(d for _, _, d in cluster.store.taken()) == names, confirm
        cluster.claim(dra.claim("y", dra.request(count=1)))
        assert cluster.schedule(pod_with("py", "y")).decision is None, confirm


def test_devices_allocated_in_a_claims_status_are_taken_even_with_no_pod_known() -> None:
    # kube-scheduler (or a restart ago, gpusched) allocated gpu-0..5: what is left is derived from the claims alone.
    cluster = DraCluster(("a",))
    cluster.claim(
        dra.claim("old", dra.request(count=6), allocation=dra.allocation("a", *[f"gpu-{i}" for i in range(6)]))
    )
    cluster.claim(dra.claim("new", dra.request(count=2)))
    _, names, _ = cluster.devices(pod_with("p", "new"))
    assert names == ["gpu-6", "gpu-7"]


def test_selectors_of_the_class_and_the_request_choose_the_node() -> None:
    cluster = DraCluster(("a", "b"))
    cluster.slice(dra.gpu_slice("b", 8, product="NVIDIA A100-SXM4-40GB", memory="40Gi"))
    cluster.store.upsert_class(
        api_dra.parse_device_class(
            dra.gpu_class("big-gpu", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('64Gi')) >= 0")
        )
    )
    cluster.claim(
        dra.claim(
            "a100", dra.request(selectors=["device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"])
        )
    )
    cluster.claim(dra.claim("big", dra.request(device_class="big-gpu")))
    assert cluster.devices(pod_with("p", "a100"))[0] == "b"
    assert cluster.devices(pod_with("q", "big"))[0] == "a"
    cluster.claim(
        dra.claim("nothing", dra.request(selectors=["device.attributes['gpu.nvidia.com'].productName == 'B200'"]))
    )
    result = cluster.schedule(pod_with("r", "nothing"))
    assert result.decision is None and result.status.message == "0/2 nodes are available: 2 cannot allocate all claims."


def test_match_attribute_keeps_the_devices_under_one_pcie_root_or_fails() -> None:
    cluster = DraCluster(("a",))
    # gpu-4 is taken: root 01 has 3 free, root 00 has 4.
    cluster.claim(dra.claim("held", dra.request(count=1), allocation=dra.allocation("a", "gpu-4")))
    cluster.claim(dra.claim("pair", dra.request("x", 2), dra.request("y", 2), same=dra.PCIE_ROOT))
    _, names, _ = cluster.devices(pod_with("p", "pair"))
    assert names == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    cluster.claim(dra.claim("four", dra.request(count=4), same=dra.PCIE_ROOT))
    # Three free under root 01 and none under 00: four under one root is not to be had.
    result = cluster.schedule(pod_with("q", "four"))
    assert result.decision is None and "cannot allocate all claims" in result.status.message
    cluster.claim(dra.claim("three", dra.request(count=3), same=dra.PCIE_ROOT))
    assert cluster.devices(pod_with("r", "three"))[1] == ["gpu-5", "gpu-6", "gpu-7"]


def test_first_available_takes_the_first_alternative_that_can_be_met() -> None:
    cluster = DraCluster(("a",))
    cluster.claim(
        dra.claim("held", dra.request(count=5), allocation=dra.allocation("a", *[f"gpu-{i}" for i in range(5)]))
    )
    cluster.claim(dra.first_available("flex", ("eight", 8), ("two", 2)))
    pod = cluster.pod(pod_with("p", "flex"))
    assert pod.gpu.count == 2  # its smallest alternative: a node with two free GPUs is not filtered out
    result = cluster.scheduler.schedule(pod)
    assert result.decision is not None, result.status.message
    (claim,) = result.decision.claims
    assert [d.request for d in claim.devices] == ["gpus/two", "gpus/two"]
    assert [d.device for d in claim.devices] == ["gpu-5", "gpu-6"]


def test_all_takes_every_matching_device_and_fails_when_one_is_taken() -> None:
    cluster = DraCluster(("a", "b"), gpus=4)
    cluster.claim(dra.claim("held", dra.request(count=1), allocation=dra.allocation("a", "gpu-3")))
    cluster.claim(dra.claim("whole-node", dra.request(mode="All")))
    pod = dataclasses.replace(cluster.pod(pod_with("p", "whole-node")), gpu=GpuRequest())
    result = cluster.scheduler.schedule(pod)
    assert result.decision is not None and result.decision.node == "b"
    assert [d.device for d in result.decision.claims[0].devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert result.decision.gpu_ids == (0, 1, 2, 3)


def test_admin_access_sees_devices_in_use_and_takes_none() -> None:
    cluster = DraCluster(("a",), gpus=1)
    cluster.claim(dra.claim("work", dra.request(count=1)))
    cluster.claim(dra.claim("monitor", dra.request(count=1, admin=True)))
    assert cluster.devices(pod_with("w", "work"))[1] == ["gpu-0"]
    pod = cluster.pod(pod_with("m", "monitor"))
    assert pod.gpu.count == 0  # admin access takes no GPU
    result = cluster.scheduler.schedule(pod)
    assert result.decision is not None
    (device,) = result.decision.claims[0].devices
    assert device.device == "gpu-0" and device.admin_access and result.decision.gpu_ids == ()


def test_a_shared_claim_allocated_for_one_pod_takes_the_next_to_its_node_and_allocates_nothing() -> None:
    cluster = DraCluster(("a", "b"))
    cluster.claim(
        dra.claim(
            "shared", dra.request(count=2), allocation=dra.allocation("b", "gpu-0", "gpu-1"), reserved_for=["first"]
        )
    )
    pod = cluster.pod(pod_with("second", "shared"))
    assert pod.gpu.count == 0  # the GPUs are the first pod's
    result = cluster.scheduler.schedule(pod)
    assert result.decision is not None and result.decision.node == "b"
    assert result.decision.claims == (api_dra.ClaimAllocation("default/shared", None),)
    # Inside one what-if, the second user of a claim a gang member just allocated follows it too.
    cluster.claim(dra.claim("team", dra.request(count=1)))
    members = [cluster.pod(pod_with(f"m-{i}", "team")) for i in range(2)]
    members[1] = dataclasses.replace(members[1], gpu=GpuRequest())
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
    placed = gang.place_gang(cluster.scheduler, group, members)
    assert placed.status.ok, placed.status.message
    assert len({d.node for d in placed.decisions}) == 1
    assert sorted(c.allocation is None for d in placed.decisions for c in d.claims) == [False, True]


def test_claims_that_do_not_exist_yet_keep_the_pod_waiting_with_the_reason() -> None:
    cluster = DraCluster(("a", "b"))
    raw = dra.with_claims(objects.pod("p"), templates={"gpu": ""})
    result = cluster.schedule(raw)
    assert result.status.code == Code.UNSCHEDULABLE
    assert result.status.message == (
        '0/2 nodes are available: waiting for the resourceclaim controller to create the ResourceClaim for "gpu".'
    )
    raw = dra.with_claims(objects.pod("p"), templates={"gpu": "p-gpu-abcde"})
    assert 'resourceclaim "p-gpu-abcde" not found' in cluster.schedule(raw).status.message
    cluster.claim(dra.claim("p-gpu-abcde", dra.request(count=1), owner="someone-else"))
    result = cluster.schedule(raw)
    assert result.status.code == Code.UNRESOLVABLE and "was not created for pod p" in result.status.message
    cluster.claim(dra.claim("p-gpu-abcde", dra.request(count=1, device_class="missing"), owner="p"))
    result = cluster.schedule(raw)
    assert 'device class "missing" does not exist' in result.status.message
    cluster.claim(dra.claim("p-gpu-abcde", dra.request(count=1), owner="p"))
    assert cluster.devices(raw)[1] == ["gpu-0"]


def test_gang_members_never_get_the_same_devices_inside_the_what_if() -> None:
    cluster = DraCluster(("a",), plugins=(*PLUGINS, "gang"), gpus=4)
    for i in range(3):
        cluster.claim(dra.claim(f"g-{i}", dra.request(count=2)))
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
    members = [cluster.pod(pod_with(f"m-{i}", f"g-{i}")) for i in range(3)]
    result = gang.place_gang(cluster.scheduler, group, members)
    assert not result.status.ok  # three pairs, four GPUs: all or nothing
    assert not cluster.store.taken() and not cluster.cache.snapshot().device_picks
    result = gang.place_gang(cluster.scheduler, group, members[:2])
    assert result.status.ok, result.status.message
    given_out = [d.device for decision in result.decisions for c in decision.claims for d in c.devices]
    assert sorted(given_out) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_an_incomplete_or_stale_pool_is_not_used() -> None:
    cluster = DraCluster(("a",), gpus=0)
    raw = dra.gpu_slice("a", 2, generation=2)
    raw["spec"]["pool"]["resourceSliceCount"] = 2  # the second slice is not written yet
    cluster.slice(raw)
    assert cluster.store.gpus("a") == ()
    cluster.slice(dra.gpu_slice("a", 4, generation=1, name="old"))  # an older generation does not count
    assert cluster.store.gpus("a") == ()
    second = dra.gpu_slice("a", 0, generation=2, name="a-second")
    second["spec"]["pool"]["resourceSliceCount"] = 2
    cluster.slice(second)
    assert [d.name for d in cluster.store.gpus("a")] == ["gpu-0", "gpu-1"]


def test_a_profile_without_the_dra_plugin_refuses_pods_with_claims() -> None:
    cluster = DraCluster(("a",), plugins=("fit", "gpu"))
    cluster.claim(dra.claim("x", dra.request(count=1)))
    result = cluster.schedule(pod_with("p", "x"))
    assert result.status.code == Code.UNRESOLVABLE and "has no dra plugin" in result.status.message


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=12),
    same_root=st.lists(st.booleans(), min_size=12, max_size=12),
    nodes=st.integers(min_value=1, max_value=3),
)
def test_never_a_device_twice_and_never_more_gpus_than_a_node_has(
    counts: list[int], same_root: list[bool], nodes: int
) -> None:
    cluster = DraCluster(tuple("abc"[:nodes]))
    for i, count in enumerate(counts):
        cluster.claim(dra.claim(f"c{i}", dra.request(count=count), same=dra.PCIE_ROOT if same_root[i] else ""))
        result = cluster.schedule(pod_with(f"p{i}", f"c{i}"))
        if result.decision is not None:
            assert len(result.decision.gpu_ids) == count
    taken: list[tuple[str, str, str]] = []
    for decision in cluster.binder.decisions:
        for claim in decision.claims:
            assert claim.allocation is not None and claim.allocation.node == decision.node
            taken.extend(d.key for d in claim.devices)
            roots = {cluster.store.device(d.key).attribute(dra.PCIE_ROOT) for d in claim.devices}  # type: ignore[union-attr]
            index = int(claim.claim.rsplit("c", 1)[1])
            assert not same_root[index] or len(roots) == 1
    assert len(taken) == len(set(taken))
    for node in cluster.cache.nodes.values():
        assert min(cluster.free_devices(node.info.name)) >= 0


def test_a_preemption_what_if_frees_the_devices_of_claims_only_its_victims_use() -> None:
    cluster = DraCluster(("a",), gpus=4)
    cluster.claim(
        dra.claim(
            "victim-gpus",
            dra.request(count=4),
            allocation=dra.allocation("a", *[f"gpu-{i}" for i in range(4)]),
            reserved_for=["victim"],
        )
    )
    victim = dra.with_claims(
        objects.pod("victim", node_name="a", annotations={"gpusched.io/gpu-ids": "0,1,2,3"}), "victim-gpus"
    )
    cluster.cache.upsert_pod(api_pod.parse_pod(victim))
    cluster.claim(dra.claim("wants", dra.request(count=2)))
    pod = cluster.pod(pod_with("preemptor", "wants"))
    assert cluster.scheduler.place(pod, cluster.cache.snapshot()).decision is None
    snapshot = cluster.cache.snapshot()
    token = snapshot.checkpoint()
    try:
        entry = cluster.cache.pod("default/victim")
        assert entry is not None
        snapshot.unplace(entry.placement)
        result = cluster.scheduler.place(pod, snapshot)
    finally:
        snapshot.rollback(token)
    assert result.decision is not None, result.status.message
    assert [d.device for d in result.decision.claims[0].devices] == ["gpu-0", "gpu-1"]


def test_a_pods_own_claim_allocated_before_a_restart_keeps_its_gpus_with_the_pod() -> None:
    # gpusched wrote p's allocation and then stopped before the binding: after the restart p goes to the claim's
    # node, allocates nothing, and its GPUs are still its own (counted in its queue and recorded with the binding).
    cluster = DraCluster(("a", "b"))
    cluster.claim(
        dra.claim(
            "p-gpus",
            dra.request(count=2),
            owner="p",
            allocation=dra.allocation("b", "gpu-4", "gpu-5"),
            reserved_for=["p"],
        )
    )
    raw = dra.with_claims(objects.pod("p"), templates={"gpus": "p-gpus"})
    pod = cluster.pod(raw)
    assert pod.gpu.count == 2
    result = cluster.scheduler.schedule(pod)
    assert result.decision is not None and result.decision.node == "b"
    assert result.decision.claims == (api_dra.ClaimAllocation("default/p-gpus", None),)
    assert result.decision.gpu_ids == (4, 5)
    # Whether the watch shows the claim before or after gpusched's own allocation, the count is the same.
    cluster.claim(dra.claim("q-gpus", dra.request(count=3), owner="q"))
    q = dra.with_claims(objects.pod("q"), templates={"gpus": "q-gpus"})
    before = cluster.pod(q).gpu.count
    cluster.scheduler.schedule(cluster.pod(q))
    assert before == cluster.pod(q).gpu.count == 3


def test_a_pod_asking_the_device_plugins_gpus_is_not_bound_where_only_dra_has_gpus() -> None:
    # A real kubelet refuses a pod asking nvidia.com/gpu on a node with no device plugin serving it.
    cluster = DraCluster(("a",))
    assert cluster.cache.nodes[0].info.gpus == 8  # its GPU slots are DRA's
    result = cluster.schedule(objects.pod("bare", gpus=1))
    assert result.decision is None
    assert "Insufficient nvidia.com/gpu" in result.status.message
    # (With a DeviceClass mapping nvidia.com/gpu to DRA, it gets a claim: tests/plugins/test_dra_extended.py.)
    # The same pod with a claim, and on a node whose device plugin serves nvidia.com/gpu, is placed.
    cluster.claim(dra.claim("one", dra.request(count=1)))
    assert cluster.devices(pod_with("with-claim", "one"))[0] == "a"
    plugin_node = DraCluster(())
    plugin_node.cache.upsert_node(api_node.parse_node(objects.node("b", gpus=8)))
    assert plugin_node.schedule(objects.pod("bare3", gpus=1)).decision is not None


def test_distinct_attribute_gives_devices_with_different_values_or_fails() -> None:
    # Two GPUs under different PCIe roots (e.g. one per NUMA node for two processes): kube-scheduler's
    # distinctAttribute. Each node has two roots of four GPUs.
    cluster = DraCluster(("a",))
    cluster.claim(dra.claim("spread", dra.request(count=2), distinct=dra.PCIE_ROOT))
    _, names, _ = cluster.devices(pod_with("p", "spread"))
    roots = {cluster.store.device((dra.DRIVER, "a", n)).attribute(dra.PCIE_ROOT) for n in names}  # type: ignore[union-attr]
    assert len(roots) == 2
    cluster.claim(dra.claim("three", dra.request(count=3), distinct=dra.PCIE_ROOT))
    result = cluster.schedule(pod_with("q", "three"))
    assert result.decision is None and "cannot allocate all claims" in result.status.message


def test_a_tainted_device_is_given_only_to_a_request_that_tolerates_it() -> None:
    cluster = DraCluster((), gpus=2)
    cluster.cache.upsert_node(api_node.parse_node(objects.node("a")))
    raw = dra.gpu_slice("a", 2)
    raw["spec"]["devices"][0]["taints"] = [{"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}]
    raw["spec"]["devices"][1]["taints"] = [{"key": "example.com/note", "effect": "None"}]
    cluster.slice(raw)
    cluster.claim(dra.claim("plain", dra.request(count=2)))
    assert cluster.schedule(pod_with("p", "plain")).decision is None
    cluster.claim(dra.claim("one", dra.request(count=1)))
    assert cluster.devices(pod_with("q", "one"))[1] == ["gpu-1"]  # effect None keeps nobody away
    tolerate = [{"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}]
    cluster.claim(dra.claim("tolerant", dra.request(count=1, tolerations=tolerate)))
    assert cluster.devices(pod_with("r", "tolerant"))[1] == ["gpu-0"]


def test_a_pods_claims_backtrack_when_a_later_claim_cannot_be_met() -> None:
    # The first claim prefers four GPUs and would take a whole PCIe root; the second needs a whole root of four.
    # Allocated one after the other without going back, the node does not fit; kube-scheduler's allocator goes back
    # to the first claim's next alternative, and so does gpusched's.
    cluster = DraCluster(("a",))
    cluster.claim(dra.first_available("flex", ("four", 4), ("two", 2)))
    cluster.claim(dra.claim("root", dra.request(count=4), same=dra.PCIE_ROOT))
    cluster.claim(dra.claim("more", dra.request(count=2)))
    pod = dra.with_claims(objects.pod("p"), "flex", "root", "more")
    node, names, _ = cluster.devices(pod)
    assert node == "a" and len(names) == 8


def test_a_node_refused_to_one_claim_is_not_refused_to_a_claim_that_tolerates_its_taint() -> None:
    # The filter remembers a node's answer per claim shape: the request's tolerations are part of that shape.
    cluster = DraCluster((), gpus=1)
    cluster.cache.upsert_node(api_node.parse_node(objects.node("a")))
    raw = dra.gpu_slice("a", 1)
    raw["spec"]["devices"][0]["taints"] = [{"key": "example.com/unhealthy", "effect": "NoSchedule"}]
    cluster.slice(raw)
    cluster.claim(dra.claim("plain", dra.request(count=1)))
    assert cluster.schedule(pod_with("p", "plain")).decision is None
    tolerate = [{"key": "example.com/unhealthy", "operator": "Exists"}]
    cluster.claim(dra.claim("tolerant", dra.request(count=1, tolerations=tolerate)))
    assert cluster.devices(pod_with("q", "tolerant"))[1] == ["gpu-0"]


def test_a_pod_whose_claim_is_not_made_yet_is_not_tried_and_runs_as_soon_as_it_is() -> None:
    # kube-scheduler's PreEnqueue: until the resourceclaim controller makes the pod's claim, the pod is not tried
    # (no attempt counted, so no backoff); the pod's update that names its claim lets it run at once.
    cluster = DraCluster(("a",))
    clock, events = Clock(), Events()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=events)
    loop.pod_pending(cluster.pod(dra.with_claims(objects.pod("p"), templates={"gpus": ""})))
    loop.run_until_idle()
    assert not cluster.binder.decisions
    assert any("waiting for the resourceclaim controller" in m for m in events.messages("pod default/p"))
    cluster.claim(dra.claim("p-gpus", dra.request(count=1), owner="p"))
    loop.pod_pending(cluster.pod(dra.with_claims(objects.pod("p"), templates={"gpus": "p-gpus"})))
    loop.run_until_idle()  # the clock has not moved: no backoff was waited
    assert [d.pod.name for d in cluster.binder.decisions] == ["p"]
