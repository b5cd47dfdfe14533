"""PersistentVolumeClaims as kube-scheduler's VolumeRestrictions, NodeVolumeLimits, VolumeBinding and VolumeZone
handle them, with their messages: which nodes a pod with claims may go to, which volume each unbound claim gets
there, and that no volume is given twice (across cycles, and inside a gang's what-if)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.volumes import ClaimBinding
from scheduler.core import gang
from scheduler.framework.interface import ClusterEvent, Code, CycleState
from scheduler.kernels import layout
from scheduler.plugins import volumes as volumes_plugin
from tests.api import objects
from tests.core.harness import Cluster

PLUGINS = ("fit", "volumes", "gpu")
HOST = "kubernetes.io/hostname"
GI = 1024**3


def pvc(
    name: str,
    *,
    storage_class: str | None = "local",
    size: str = "1Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    volume: str = "",
    owner: str = "",
    selected_node: str = "",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    if selected_node:
        meta["annotations"] = {api_volumes.ANNOTATION_SELECTED_NODE: selected_node}
    spec: dict[str, Any] = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    return {"metadata": meta, "spec": spec, "status": {"phase": "Bound" if volume else "Pending"}}


def pv(
    name: str,
    *,
    node: str = "",
    size: str = "1Gi",
    storage_class: str = "local",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    claim: str = "",
    labels: dict[str, str] | None = None,
    csi: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": storage_class,
    }
    if node:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]}]
            }
        }
    if claim:
        spec["claimRef"] = {"namespace": "default", "name": claim, "uid": f"uid-{claim}"}
    if csi:
        spec["csi"] = {"driver": csi, "volumeHandle": f"handle-{name}"}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": "Bound" if claim else "Available"},
    }


def storage_class(
    name: str = "local",
    *,
    wait: bool = True,
    provisioner: str = api_volumes.NO_PROVISIONER,
    zones: tuple[str, ...] = (),
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer" if wait else "Immediate",
    }
    if zones:
        raw["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": list(zones)}]}
        ]
    return raw


def with_claims(raw: dict[str, Any], *claims: str, ephemeral: str = "") -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": claim}} for i, claim in enumerate(claims)
    ]
    if ephemeral:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    raw["spec"]["volumes"] = volumes
    return raw


def cluster_with(
    nodes: list[dict[str, Any]],
    *,
    claims: tuple[dict[str, Any], ...] = (),
    volumes: tuple[dict[str, Any], ...] = (),
    classes: tuple[dict[str, Any], ...] = (storage_class(),),
    plugins: tuple[str, ...] = PLUGINS,
    bound: tuple[dict[str, Any], ...] = (),
) -> Cluster:
    cluster = Cluster(nodes, plugins)
    store = cluster.cache.volumes
    for raw in classes:
        store.upsert_class(api_volumes.parse_storage_class(raw))
    for raw in claims:
        store.upsert_claim(api_volumes.parse_claim(raw))
    for raw in volumes:
        store.upsert_volume(api_volumes.parse_volume(raw))
    for raw in bound:
        cluster.cache.upsert_pod(api_pod.parse_pod(raw))
    return cluster


def _failure(cluster: Cluster, raw: dict[str, Any], code: Code = Code.UNSCHEDULABLE) -> str:
    result = cluster.schedule(raw)
    assert result.decision is None, result.decision
    assert result.status.code == code, result.status
    return result.status.message


def nodes(*names: str, **labels: str) -> list[dict[str, Any]]:
    return [objects.node(n, gpus=8, labels={"topology.kubernetes.io/zone": labels.get(n, "z")}) for n in names]


def test_a_missing_claim_keeps_the_pod_waiting_with_kubes_message_until_the_claim_exists() -> None:
    cluster = cluster_with(nodes("a", "b", "c"), volumes=(pv("pv-a", node="a"),))
    message = _failure(cluster, with_claims(objects.pod("p"), "data"), Code.UNRESOLVABLE)
    assert message == '0/3 nodes are available: persistentvolumeclaim "data" not found.'
    cluster.cache.volumes.upsert_claim(api_volumes.parse_claim(pvc("data")))
    result = cluster.schedule(with_claims(objects.pod("p"), "data"))
    assert result.decision is not None and result.decision.node == "a"
    assert result.decision.volumes == (ClaimBinding("default/data", "a", "pv-a"),)


def test_a_bound_claim_takes_the_pod_to_its_volumes_node() -> None:
    cluster = cluster_with(
        nodes("a", "b", "c"),
        claims=(pvc("data", volume="pv-b"),),
        volumes=(pv("pv-b", node="b", claim="data"),),
    )
    result = cluster.schedule(with_claims(objects.pod("p", gpus=1), "data"))
    assert result.decision is not None and result.decision.node == "b"
    assert result.decision.volumes == ()  # bound already: nothing to bind
    # With b short of GPUs, no other node will do, and kube's message says why.
    message = _failure(cluster, with_claims(objects.pod("q", gpus=8), "data"))
    assert message == (
        "0/3 nodes are available: 2 node(s) had volume node affinity conflict, 1 Insufficient nvidia.com/gpu."
    )


def test_a_bound_claims_missing_volume_and_its_zone_are_checked() -> None:
    zoned = pv("pv-z", labels={"topology.kubernetes.io/zone": "east__west"}, claim="zoned")
    cluster = cluster_with(
        nodes("a", "b", "c", a="east", b="north", c="west"),
        claims=(pvc("zoned", volume="pv-z"), pvc("lost", volume="gone")),
        volumes=(zoned,),
    )
    result = cluster.schedule(with_claims(objects.pod("p"), "zoned"))
    assert result.decision is not None and result.decision.node == "a"
    cluster.cache.upsert_node(cluster.cache.nodes[0].info.__class__(**{**_info(cluster, "a"), "labels": {}}))
    result = cluster.schedule(with_claims(objects.pod("p2"), "zoned"))
    assert result.decision is not None and result.decision.node == "c"
    message = _failure(cluster, with_claims(objects.pod("p3"), "lost"))
    assert message == (
        "0/3 nodes are available: 3 node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)."
    )


def _info(cluster: Cluster, name: str) -> dict[str, Any]:
    slot = cluster.cache.slot_of(name)
    assert slot is not None
    info = cluster.cache.nodes[slot].info
    return {f: getattr(info, f) for f in info.__dataclass_fields__}


def test_an_unbound_immediate_claim_leaves_the_pod_pending_with_kubes_message() -> None:
    cluster = cluster_with(
        nodes("a", "b"),
        claims=(pvc("now", storage_class="fast"), pvc("classless", storage_class=None)),
        classes=(storage_class("fast", wait=False, provisioner="example.com/csi"),),
    )
    for claim in ("now", "classless"):
        message = _failure(cluster, with_claims(objects.pod(f"p-{claim}"), claim), Code.UNRESOLVABLE)
        assert message == "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    message = _failure(cluster, with_claims(objects.pod("p"), "x"), Code.UNRESOLVABLE)
    assert "not found" in message
    cluster.cache.volumes.upsert_claim(api_volumes.parse_claim(pvc("x", storage_class="nosuch")))
    message = _failure(cluster, with_claims(objects.pod("p"), "x"), Code.UNRESOLVABLE)
    assert message == '0/2 nodes are available: storageclass.storage.k8s.io "nosuch" not found.'


def test_wait_for_first_consumer_picks_the_smallest_volume_that_fits_on_the_node() -> None:
    cluster = cluster_with(
        nodes("a", "b"),
        claims=(pvc("data", size="4Gi"),),
        volumes=(
            pv("big", node="b", size="20Gi"),
            pv("small", node="b", size="5Gi"),
            pv("tiny", node="b", size="3Gi"),  # below the request
            pv("rwx", node="a", size="4Gi", modes=("ReadWriteMany",)),  # lacks ReadWriteOnce
            pv("other-class", node="a", size="4Gi", storage_class="slow"),
        ),
    )
    result = cluster.schedule(with_claims(objects.pod("p"), "data"))
    assert result.decision is not None
    assert result.decision.node == "b"
    assert result.decision.volumes == (ClaimBinding("default/data", "b", "small"),)


def test_no_node_with_a_matching_volume_or_provisioning_gives_kubes_message() -> None:
    cluster = cluster_with(nodes("a", "b"), claims=(pvc("data", size="4Gi"),), volumes=(pv("tiny", size="1Gi"),))
    message = _failure(cluster, with_claims(objects.pod("p"), "data"))
    assert message == "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind."


def test_a_static_volume_is_never_given_twice_and_is_released_when_the_binding_fails() -> None:
    cluster = cluster_with(
        nodes("a", "b"),
        claims=(pvc("one"), pvc("two")),
        volumes=(pv("only", node="a"),),
    )
    first = cluster.schedule(with_claims(objects.pod("p1"), "one"))
    assert first.decision is not None and first.decision.volumes == (ClaimBinding("default/one", "a", "only"),)
    message = _failure(cluster, with_claims(objects.pod("p2"), "two"))
    assert "2 node(s) didn't find available persistent volumes to bind" in message
    # A second pod sharing the first claim follows it to the volume's node.
    sharing = cluster.schedule(with_claims(objects.pod("p1b"), "one"))
    assert sharing.decision is not None and sharing.decision.node == "a" and sharing.decision.volumes == ()
    # The first pod's binding fails: its volume is free again for the other claim.
    cluster.scheduler.bind_failed("default/p1")
    second = cluster.schedule(with_claims(objects.pod("p2"), "two"))
    assert second.decision is not None and second.decision.volumes == (ClaimBinding("default/two", "a", "only"),)


def test_the_watch_showing_the_volume_taken_ends_the_reservation() -> None:
    cluster = cluster_with(nodes("a"), claims=(pvc("one"),), volumes=(pv("only", node="a"),))
    cluster.place(with_claims(objects.pod("p1"), "one"))
    store = cluster.cache.volumes
    assert store.assumed_volumes == {"only": "default/one"}
    store.upsert_volume(api_volumes.parse_volume(pv("only", node="a", claim="one")))
    store.upsert_claim(api_volumes.parse_claim(pvc("one", volume="only")))
    assert not store.assumed_volumes and not store.assumed_claims


def test_provisioning_follows_the_classes_allowed_topologies() -> None:
    cluster = cluster_with(
        nodes("a", "b", "c", a="east", b="west", c="west"),
        claims=(pvc("data", storage_class="csi"),),
        classes=(storage_class("csi", provisioner="example.com/csi", zones=("west",)),),
    )
    result = cluster.schedule(with_claims(objects.pod("p"), "data"))
    assert result.decision is not None and result.decision.node == "b"
    assert result.decision.volumes == (ClaimBinding("default/data", "b", ""),)
    assert result.decision.volumes[0].provision
    # Once asked for b (the claim's selected-node annotation), the claim goes nowhere else.
    store = cluster.cache.volumes
    cluster.scheduler.bind_failed("default/p")
    store.upsert_claim(api_volumes.parse_claim(pvc("data", storage_class="csi", selected_node="c")))
    result = cluster.schedule(with_claims(objects.pod("p"), "data"))
    assert result.decision is not None and result.decision.node == "c" and result.decision.volumes == ()


def test_a_pods_claims_get_distinct_volumes_on_the_node() -> None:
    cluster = cluster_with(
        nodes("a", "b"),
        claims=(pvc("x"), pvc("y")),
        volumes=(pv("a-1", node="a"), pv("b-1", node="b"), pv("b-2", node="b")),
    )
    result = cluster.schedule(with_claims(objects.pod("p"), "x", "y"))
    assert result.decision is not None and result.decision.node == "b"
    assert {b.volume for b in result.decision.volumes} == {"b-1", "b-2"}


def test_read_write_once_pod_claim_used_by_another_pod_blocks_with_kubes_message() -> None:
    holder = with_claims(objects.pod("holder", node_name="a", phase="Running"), "solo")
    cluster = cluster_with(
        nodes("a", "b"),
        claims=(pvc("solo", modes=("ReadWriteOncePod",), volume="pv-solo"),),
        volumes=(pv("pv-solo", claim="solo", modes=("ReadWriteOncePod",)),),
        bound=(holder,),
    )
    message = _failure(cluster, with_claims(objects.pod("p"), "solo"))
    assert message == (
        "0/2 nodes are available: node has pod using PersistentVolumeClaim with the same name and "
        "ReadWriteOncePod access mode."
    )
    # A what-if that removes the holder (a preemption's victim) frees the claim there.
    snapshot = cluster.cache.snapshot()
    token = snapshot.checkpoint()
    try:
        entry = cluster.cache.pod("default/holder")
        assert entry is not None
        snapshot.unplace(entry.placement)
        tried = cluster.scheduler.place(api_pod.parse_pod(with_claims(objects.pod("p"), "solo")), snapshot)
        assert tried.decision is not None
    finally:
        snapshot.rollback(token)
    cluster.cache.remove_pod("default/holder")
    assert cluster.schedule(with_claims(objects.pod("p"), "solo")).decision is not None


def test_csi_attach_limits_count_unique_volumes_per_driver_on_the_node() -> None:
    cluster = cluster_with(
        nodes("a", "b"),
        claims=(pvc("old", volume="pv-old"), pvc("new", volume="pv-new"), pvc("new2", volume="pv-new2")),
        volumes=(
            pv("pv-old", claim="old", csi="disk.example.com"),
            pv("pv-new", claim="new", csi="disk.example.com"),
            pv("pv-new2", claim="new2", csi="disk.example.com"),
        ),
        bound=(with_claims(objects.pod("old-user", node_name="a", phase="Running"), "old"),),
    )
    store = cluster.cache.volumes
    for node in ("a", "b"):
        store.upsert_csi_node(
            api_volumes.parse_csi_node(
                {
                    "metadata": {"name": node},
                    "spec": {"drivers": [{"name": "disk.example.com", "allocatable": {"count": 1}}]},
                }
            )
        )
    # A second pod of the volume already attached to a adds nothing there.
    again = cluster.schedule(with_claims(objects.pod("again"), "old"))
    assert again.decision is not None and again.decision.node == "a"
    result = cluster.schedule(with_claims(objects.pod("p"), "new"))
    assert result.decision is not None and result.decision.node == "b"
    message = _failure(cluster, with_claims(objects.pod("q"), "new2"))
    assert message == "0/2 nodes are available: 2 node(s) exceed max volume count."


def test_an_ephemeral_volumes_claim_must_exist_and_belong_to_the_pod() -> None:
    cluster = cluster_with(nodes("a"), volumes=(pv("pv-a", node="a"),))
    raw = with_claims(objects.pod("web"), ephemeral="scratch")
    message = _failure(cluster, raw, Code.UNRESOLVABLE)
    assert message == '0/1 nodes are available: persistentvolumeclaim "web-scratch" not found.'
    store = cluster.cache.volumes
    store.upsert_claim(api_volumes.parse_claim(pvc("web-scratch", owner="uid-someone-else")))
    assert "was not created for pod default/web" in _failure(cluster, raw, Code.UNRESOLVABLE)
    store.upsert_claim(api_volumes.parse_claim(pvc("web-scratch", owner="uid-web")))
    result = cluster.schedule(raw)
    assert result.decision is not None
    assert result.decision.volumes == (ClaimBinding("default/web-scratch", "a", "pv-a"),)


def test_gang_members_never_get_the_same_volume_inside_the_what_if() -> None:
    claims = tuple(pvc(f"w-{i}") for i in range(3))
    cluster = cluster_with(
        nodes("a", "b"),
        claims=claims,
        volumes=(pv("pv-a", node="a"), pv("pv-b", node="b")),
        plugins=(*PLUGINS, "gang"),
    )
    group = api_podgroup.parse_podgroup({"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})
    members = [api_pod.parse_pod(with_claims(objects.pod(f"m-{i}", gpus=1), f"w-{i}")) for i in range(3)]
    # Three members, two volumes: the whole gang does not fit, and nothing is left held.
    result = gang.place_gang(cluster.scheduler, group, members)
    assert not result.status.ok
    assert "didn't find available persistent volumes to bind" in result.status.message
    assert not cluster.cache.volumes.assumed_volumes
    snapshot = cluster.cache.snapshot()
    assert not snapshot.volume_picks
    # Two members fit, one per volume, although the gang score would put them together.
    result = gang.place_gang(cluster.scheduler, group, members[:2])
    assert result.status.ok, result.status.message
    chosen = {b.volume: d.node for d in result.decisions for b in d.volumes}
    assert chosen == {"pv-a": "a", "pv-b": "b"}
    assert cluster.cache.volumes.assumed_volumes == {"pv-a": "default/w-0", "pv-b": "default/w-1"} or (
        cluster.cache.volumes.assumed_volumes == {"pv-a": "default/w-1", "pv-b": "default/w-0"}
    )


def test_a_pod_without_claims_skips_the_plugin_before_any_per_node_work() -> None:
    cluster = cluster_with(nodes("a"))
    plugin = volumes_plugin.Volumes({})
    pod = api_pod.parse_pod(objects.pod("plain"))
    snapshot = cluster.cache.snapshot()
    state = CycleState(pod=pod, snapshot=snapshot, request=snapshot.request_vector(pod))
    assert plugin.pre_filter(state).ok
    assert volumes_plugin.PLAN not in state.data
    reasons = snapshot.arrays.base_reason.copy()
    plugin.filter(state, reasons)
    assert (reasons == snapshot.arrays.base_reason).all()


def test_volume_reasons_wake_on_volume_node_and_pod_events() -> None:
    plugin = volumes_plugin.Volumes({})
    for code in (volumes_plugin.BIND_CONFLICT.code, volumes_plugin.NODE_CONFLICT.code, volumes_plugin.LIMIT.code):
        wakes = plugin.wakes(code)
        assert wakes is not None and ClusterEvent.VOLUME_CHANGED in wakes
    assert plugin.wakes(layout.GPU_COUNT) is None  # not one of its codes


def test_claim_sizes_are_compared_in_bytes() -> None:
    claim = api_volumes.parse_claim(pvc("c", size="1Gi"))
    volume = api_volumes.parse_volume(pv("v", size="1073741824"))
    assert claim.request == volume.capacity == GI


@settings(max_examples=40, deadline=None)
@given(
    volumes=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 8)), min_size=0, max_size=8),
    requests=st.lists(st.integers(1, 8), min_size=1, max_size=8),
    failed=st.sets(st.integers(0, 7)),
)
def test_no_static_volume_is_ever_given_twice_and_every_choice_fits(
    volumes: list[tuple[str, int]], requests: list[int], failed: set[int]
) -> None:
    cluster = cluster_with(
        nodes("a", "b", "c"),
        claims=tuple(pvc(f"c{i}", size=f"{size}Gi") for i, size in enumerate(requests)),
        volumes=tuple(pv(f"v{i}", node=node, size=f"{size}Gi") for i, (node, size) in enumerate(volumes)),
    )
    sizes = {f"v{i}": (node, size) for i, (node, size) in enumerate(volumes)}
    unplaced = []
    live: dict[str, int] = {}  # volume -> the pod it was given to, while that pod's binding stands
    for i, _ in enumerate(requests):
        result = cluster.schedule(with_claims(objects.pod(f"p{i}"), f"c{i}"))
        if result.decision is None:
            # Nothing left that fits this claim anywhere (no provisioner): kube's message.
            assert "didn't find available persistent volumes to bind" in result.status.message
            unplaced.append(i)
            continue
        (binding,) = result.decision.volumes
        node, size = sizes[binding.volume]
        assert binding.node == result.decision.node == node and size >= requests[i]
        assert binding.volume not in live, f"{binding.volume} given to p{live.get(binding.volume)} and p{i}"
        live[binding.volume] = i
        if i in failed:
            cluster.scheduler.bind_failed(f"default/p{i}")  # its volume is free again
            del live[binding.volume]
    held = cluster.cache.volumes.assumed_volumes
    assert held == {volume: f"default/c{i}" for volume, i in live.items()}
    # A claim turned away found nothing big enough: every volume free now was free at its turn too (released ones
    # were released at once), so each is smaller than it asked.
    free = {name for name in sizes if name not in held}
    for i in unplaced:
        assert all(sizes[name][1] < requests[i] for name in free)
