"""The cache: a node's usage is the sum of its pods, whoever bound them, through every kind of update."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.api.devices import dra as api_dra
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects import volumes as api_volumes
from scheduler.cache.arrays import ClusterArrays
from scheduler.cache.state import Cache, UnknownNode
from scheduler.kernels import layout
from tests.api import objects

GIB = 2**30
MIB = 2**20


def _cache(*nodes: dict[str, Any]) -> Cache:
    cache = Cache()
    for raw in nodes:
        cache.upsert_node(api_node.parse_node(raw))
    return cache


def _used(cache: Cache, node: str, column: int) -> float:
    slot = cache.slot_of(node)
    assert slot is not None
    return float(cache.arrays.used[slot, column])


def _free_devices(cache: Cache, node: str) -> list[float]:
    slot = cache.slot_of(node)
    assert slot is not None
    return cache.arrays.gpu_free[slot, : cache.arrays.gpu_count[slot]].tolist()


def _bound(name: str, node: str, **kw: Any) -> api_pod.PodRequest:
    return api_pod.parse_pod(objects.pod(name, node_name=node, **kw))


def test_usage_is_the_sum_of_bound_pods_whatever_scheduler_bound_them() -> None:
    cache = _cache(objects.node("a", gpus=4, gpu_memory_mib="81920"), objects.node("b"))
    cache.upsert_pod(_bound("p1", "a", cpu="500m", memory="1Gi", scheduler_name="default-scheduler"))
    cache.upsert_pod(_bound("p2", "a", cpu="1500m", memory="2Gi", gpus=2, scheduler_name="volcano"))
    cache.upsert_pod(_bound("p3", "a", cpu="1", milli=300, gpu_memory="10Gi"))
    cache.upsert_pod(api_pod.parse_pod(objects.pod("pending", cpu="8")))  # not bound: holds nothing
    assert _used(cache, "a", layout.CPU) == 3000
    assert _used(cache, "a", layout.MEMORY) == 3 * GIB
    assert _used(cache, "a", layout.PODS) == 3
    assert _used(cache, "a", layout.GPU_MILLI) == 2300
    # Whole GPUs take all their devices' memory; the shared pod takes what it asked for.
    assert _used(cache, "a", layout.GPU_MEMORY) == 2 * 81920 * MIB + 10 * GIB
    assert _free_devices(cache, "a") == [0.0, 0.0, 700.0, 1000.0]
    assert cache.arrays.used[cache.slot_of("b")].sum() == 0
    assert {e.pod.key for e in cache.pods()} == {"default/p1", "default/p2", "default/p3"}


def test_updating_a_pod_replaces_what_it_takes() -> None:
    cache = _cache(objects.node("a", gpus=2))
    cache.upsert_pod(_bound("p", "a", cpu="1", milli=400))
    cache.upsert_pod(_bound("p", "a", cpu="1", milli=400))  # the same again: nothing changes
    assert _used(cache, "a", layout.CPU) == 1000
    assert _free_devices(cache, "a") == [600.0, 1000.0]
    cache.upsert_pod(_bound("p", "a", cpu="3", milli=400))  # resized in place: keeps its device
    assert _used(cache, "a", layout.CPU) == 3000
    assert _used(cache, "a", layout.PODS) == 1
    assert _free_devices(cache, "a") == [600.0, 1000.0]


def test_removing_or_finishing_a_pod_releases_it() -> None:
    cache = _cache(objects.node("a", gpus=1))
    cache.upsert_pod(_bound("p1", "a", gpus=1))
    cache.upsert_pod(_bound("p2", "a", cpu="2"))
    cache.remove_pod("default/p1")
    cache.upsert_pod(_bound("p2", "a", cpu="2", phase="Succeeded"))
    assert cache.arrays.used[cache.slot_of("a")].sum() == 0
    assert _free_devices(cache, "a") == [1000.0]
    assert list(cache.pods()) == []
    cache.remove_pod("default/never-seen")  # harmless


def test_a_pod_bound_to_an_unknown_node_counts_once_the_node_arrives() -> None:
    cache = _cache(objects.node("a"))
    cache.upsert_pod(_bound("early", "late-node", cpu="2"))
    assert list(cache.pods()) == []
    cache.upsert_node(api_node.parse_node(objects.node("late-node")))
    assert _used(cache, "late-node", layout.CPU) == 2000
    cache.upsert_node(api_node.parse_node(objects.node("late-node")))  # again: still counted once
    assert _used(cache, "late-node", layout.CPU) == 2000


def test_a_waiting_pod_that_is_deleted_never_counts() -> None:
    cache = _cache()
    cache.upsert_pod(_bound("early", "late-node", cpu="2"))
    cache.remove_pod("default/early")
    cache.upsert_node(api_node.parse_node(objects.node("late-node")))
    assert _used(cache, "late-node", layout.CPU) == 0


def test_a_removed_node_that_comes_back_counts_its_pods_again() -> None:
    cache = _cache(objects.node("a", gpus=2), objects.node("b"))
    cache.upsert_pod(_bound("p", "a", cpu="2", gpus=1, annotations={"gpusched.io/gpu-ids": "1"}))
    cache.remove_node("a")
    assert cache.slot_of("a") is None
    assert list(cache.pods()) == []
    cache.upsert_node(api_node.parse_node(objects.node("a", gpus=2)))
    assert _used(cache, "a", layout.CPU) == 2000
    assert _free_devices(cache, "a") == [1000.0, 0.0]
    cache.remove_node("missing")  # harmless


def test_a_node_update_keeps_its_pods_and_takes_the_new_capacity() -> None:
    cache = _cache(objects.node("a", cpu="8"))
    cache.upsert_pod(_bound("p", "a", cpu="3"))
    cache.upsert_node(api_node.parse_node(objects.node("a", cpu="16", labels={"pool": "x"})))
    slot = cache.slot_of("a")
    assert cache.arrays.cap[slot, layout.CPU] == 16000
    assert cache.arrays.used[slot, layout.CPU] == 3000
    assert cache.labels.labels(slot)["pool"] == "x"


def test_cordoned_nodes_are_marked() -> None:
    cache = _cache(objects.node("a", unschedulable=True), objects.node("b"))
    assert cache.arrays.base_reason[cache.slot_of("a")] == layout.UNSCHEDULABLE
    assert cache.arrays.base_reason[cache.slot_of("b")] == layout.FIT


def test_assume_confirm_and_forget() -> None:
    cache = _cache(objects.node("a", gpus=2), objects.node("b"))
    pod = api_pod.parse_pod(objects.pod("p", cpu="2", gpus=1))
    placement = cache.assume(pod, "a", (1,))
    assert placement.gpu_ids == (1,)
    assert cache.is_assumed("default/p")
    assert _used(cache, "a", layout.CPU) == 2000
    assert _free_devices(cache, "a") == [1000.0, 0.0]
    cache.forget("default/p")
    assert not cache.is_assumed("default/p")
    assert cache.arrays.used[cache.slot_of("a")].sum() == 0
    assert _free_devices(cache, "a") == [1000.0, 1000.0]

    cache.assume(pod, "a", (1,))
    cache.confirm("default/p")
    cache.forget("default/p")  # too late: the binding went through
    assert _used(cache, "a", layout.CPU) == 2000

    with pytest.raises(UnknownNode):
        cache.assume(pod, "nowhere")


def test_the_api_servers_word_on_an_assumed_pod_does_not_double_count_it() -> None:
    cache = _cache(objects.node("a", gpus=2))
    cache.assume(api_pod.parse_pod(objects.pod("p", cpu="2", gpus=1)), "a", (1,))
    cache.upsert_pod(api_pod.parse_pod(objects.pod("p", cpu="2", gpus=1)))  # still pending: binding in flight
    assert cache.is_assumed("default/p")
    cache.upsert_pod(_bound("p", "a", cpu="2", gpus=1))
    assert not cache.is_assumed("default/p")
    assert _used(cache, "a", layout.CPU) == 2000
    assert _used(cache, "a", layout.PODS) == 1
    assert _free_devices(cache, "a") == [1000.0, 0.0]


def test_a_nodes_pods_version_changes_with_every_change_of_its_pods_and_only_then() -> None:
    """What consolidation's memos hold against: a confirm or a pod's new object changes no array, but may change
    whether the pod may move."""
    cache = _cache(objects.node("a", gpus=2), objects.node("b"))
    a, b = cache.slot_of("a"), cache.slot_of("b")
    assert a is not None and b is not None
    seen: list[int] = []

    def changed() -> bool:
        seen.append(cache.pods_version(a))
        return len(seen) < 2 or seen[-1] != seen[-2]

    changed()
    untouched = cache.pods_version(b)
    cache.assume(api_pod.parse_pod(objects.pod("p", cpu="2", gpus=1)), "a", (1,))
    assert changed()
    cache.upsert_pod(api_pod.parse_pod(objects.pod("p", cpu="2", gpus=1, labels={"x": "1"})))  # binding in flight
    assert changed()
    gen = int(cache.arrays.gen[a])
    cache.upsert_pod(_bound("p", "a", cpu="2", gpus=1))  # confirmed by the watch
    assert changed() and int(cache.arrays.gen[a]) == gen
    assert not changed()
    cache.assume(api_pod.parse_pod(objects.pod("q", cpu="1")), "a")
    assert changed()
    gen = int(cache.arrays.gen[a])
    cache.confirm("default/q")  # confirmed by the simulator's binder
    assert changed() and int(cache.arrays.gen[a]) == gen
    cache.upsert_node(api_node.parse_node(objects.node("a", gpus=2)))  # the same node again: nothing changes
    assert not changed()
    cache.upsert_node(api_node.parse_node(objects.node("a", gpus=4)))  # its pods' placements are made again
    assert changed()
    cache.remove_pod("default/p")
    assert changed()
    cache.remove_node("a")
    assert changed()
    assert cache.pods_version(b) == untouched


def test_the_gpu_ids_annotation_says_which_devices_a_pod_holds() -> None:
    cache = _cache(objects.node("a", gpus=4))
    cache.upsert_pod(_bound("shared", "a", milli=250, annotations={"gpusched.io/gpu-ids": "2"}))
    cache.upsert_pod(_bound("whole", "a", gpus=2, annotations={"gpusched.io/gpu-ids": "3,0"}))
    assert _free_devices(cache, "a") == [0.0, 1000.0, 750.0, 0.0]
    # Ids that make no sense on the node (out of range, or the wrong number) are replaced by a likely guess.
    cache.upsert_pod(_bound("odd", "a", gpus=1, annotations={"gpusched.io/gpu-ids": "7"}))
    assert _free_devices(cache, "a") == [0.0, 0.0, 750.0, 0.0]


def test_without_gpu_ids_devices_are_guessed_as_a_device_plugin_would() -> None:
    cache = _cache(objects.node("a", gpus=4))
    cache.upsert_pod(_bound("s1", "a", milli=600, annotations={"gpusched.io/gpu-ids": "1"}))
    cache.upsert_pod(_bound("w", "a", gpus=2))  # lowest-index fully free devices
    cache.upsert_pod(_bound("s2", "a", milli=300))  # the fitting device with least free
    assert _free_devices(cache, "a") == [0.0, 100.0, 0.0, 1000.0]


def test_a_guess_over_committed_by_a_race_takes_the_gpus_the_refused_pod_leaves() -> None:
    # kube-scheduler and gpusched chose GPU 3 in the same moment: gpusched's pod has it by its gpu-ids, and the
    # other scheduler's pod, guessed onto the devices with most free, over-commits GPU 0. The kubelet refuses
    # gpusched's pod (it leaves): kube-scheduler's holds the freed GPU 3, and no GPU shows free that is not.
    cache = _cache(objects.node("a", gpus=4))
    cache.upsert_pod(_bound("ours", "a", gpus=3, annotations={"gpusched.io/gpu-ids": "0,1,2"}))
    cache.upsert_pod(_bound("racer", "a", gpus=1, annotations={"gpusched.io/gpu-ids": "3"}))
    cache.upsert_pod(_bound("theirs", "a", gpus=1, scheduler_name="default-scheduler"))
    assert _free_devices(cache, "a") == [-1000.0, 0.0, 0.0, 0.0]
    cache.upsert_pod(_bound("racer", "a", gpus=1, annotations={"gpusched.io/gpu-ids": "3"}, phase="Failed"))
    assert _free_devices(cache, "a") == [0.0, 0.0, 0.0, 0.0]
    theirs = cache.pod("default/theirs")
    assert theirs is not None and theirs.placement.gpu_ids == (3,)
    # Pods with their own gpu-ids are never moved by a guess: the node is simply full until one leaves.
    cache.remove_pod("default/theirs")
    assert _free_devices(cache, "a") == [0.0, 0.0, 0.0, 1000.0]


def test_gpu_ids_survive_the_devices_disappearing_for_a_while() -> None:
    # A device plugin restart briefly reports no GPUs; when they return, pods are where their annotation says.
    cache = _cache(objects.node("a", gpus=4))
    cache.upsert_pod(_bound("s", "a", milli=500, annotations={"gpusched.io/gpu-ids": "3"}))
    cache.upsert_pod(_bound("w", "a", gpus=1, annotations={"gpusched.io/gpu-ids": "2"}))
    cache.upsert_node(api_node.parse_node(objects.node("a", gpus=0)))
    assert _used(cache, "a", layout.GPU_MILLI) == 1500  # still counted: the node shows no room
    cache.upsert_node(api_node.parse_node(objects.node("a", gpus=4)))
    assert _free_devices(cache, "a") == [1000.0, 1000.0, 0.0, 500.0]


def test_extended_resources_get_a_column_on_first_use() -> None:
    cache = _cache(objects.node("a", extra={"rdma/hca": "4"}), objects.node("b"))
    column = cache.columns.index("rdma/hca")
    assert column >= layout.FIXED
    assert cache.arrays.cap[cache.slot_of("a"), column] == 4
    assert cache.arrays.cap[cache.slot_of("b"), column] == 0
    cache.upsert_pod(_bound("p", "b", extra={"example.com/foo": "2"}))
    foo = cache.columns.index("example.com/foo")
    assert foo == column + 1
    assert cache.arrays.cap.shape[1] >= foo + 1
    assert _used(cache, "b", foo) == 2
    assert cache.arrays.cap[:, foo].sum() == 0


def test_many_nodes_grow_the_arrays_and_keep_every_row() -> None:
    cache = _cache(*(objects.node(f"n{i}", cpu=str(i + 1)) for i in range(100)))
    assert cache.node_count == 100
    assert all(cache.arrays.cap[cache.slot_of(f"n{i}"), layout.CPU] == (i + 1) * 1000 for i in range(100))


# --- snapshots -----------------------------------------------------------------------------------------------


def test_a_snapshot_is_a_copy_and_refreshes_only_the_rows_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _cache(objects.node("a"), objects.node("b"), objects.node("c"))
    first = cache.snapshot()
    np.testing.assert_array_equal(first.arrays.used, cache.arrays.used)
    cache.upsert_pod(_bound("p", "b", cpu="4"))
    assert first.arrays.used[cache.slot_of("b"), layout.CPU] == 0  # a copy, not a view

    copied: list[list[int]] = []
    original = ClusterArrays.copy_rows

    def spy(self: ClusterArrays, other: ClusterArrays, rows: np.ndarray) -> None:
        copied.append(sorted(rows.tolist()))
        original(self, other, rows)

    monkeypatch.setattr(ClusterArrays, "copy_rows", spy)
    second = cache.snapshot()
    assert second is first  # refreshed in place
    assert copied == [[cache.slot_of("b")]]
    assert second.arrays.used[cache.slot_of("b"), layout.CPU] == 4000
    np.testing.assert_array_equal(second.arrays.gen, cache.arrays.gen)
    cache.snapshot()
    assert len(copied) == 1  # nothing changed since: nothing copied


def test_a_refreshed_snapshot_equals_the_cache_in_every_array() -> None:
    # One row changed (copied by a plain index) and then two (by a fancy one): every per-slot array of the
    # snapshot, whichever its name, is the cache's again.
    cache = _cache(objects.node("a", gpus=8), objects.node("b", gpus=4), objects.node("c"))
    snap = cache.snapshot()

    def arrays(view: ClusterArrays) -> dict[str, np.ndarray]:
        return {name: value for name, value in vars(view).items() if isinstance(value, np.ndarray)}

    for change in (
        lambda: cache.upsert_pod(_bound("p", "b", cpu="4", gpus=2)),
        lambda: (cache.upsert_pod(_bound("q", "a", gpus=1)), cache.remove_pod("default/p")),
    ):
        change()
        assert cache.snapshot() is snap
        ours, theirs = arrays(snap.arrays), arrays(cache.arrays)
        assert ours.keys() == theirs.keys()
        for name, value in theirs.items():
            np.testing.assert_array_equal(ours[name], value, err_msg=name)


def test_a_snapshot_follows_new_columns_and_nodes() -> None:
    cache = _cache(objects.node("a"))
    cache.snapshot()
    cache.upsert_node(api_node.parse_node(objects.node("b", extra={"rdma/hca": "2"})))
    snap = cache.snapshot()
    assert snap.columns == cache.columns
    np.testing.assert_array_equal(snap.arrays.cap, cache.arrays.cap)


def _state(arrays: ClusterArrays) -> list[np.ndarray]:
    return [a.copy() for a in (arrays.used, arrays.gpu_free, arrays.gpu_mem_free, arrays.gen)]


def _assert_same(before: list[np.ndarray], arrays: ClusterArrays) -> None:
    for want, got in zip(before, _state(arrays), strict=True):
        np.testing.assert_array_equal(got, want)


def test_rollback_restores_a_snapshot_exactly_and_leaves_the_cache_alone() -> None:
    cache = _cache(objects.node("a", gpus=2, gpu_memory_mib="1024"), objects.node("b", gpus=1))
    snap = cache.snapshot()
    before, cache_before = _state(snap.arrays), _state(cache.arrays)
    token = snap.checkpoint()
    snap.place(snap.placement(api_pod.parse_pod(objects.pod("w", gpus=2)), cache.slot_of("a"), (0, 1)))
    snap.place(snap.placement(api_pod.parse_pod(objects.pod("s", milli=200)), cache.slot_of("b"), (0,)))
    assert snap.arrays.gpu_free[cache.slot_of("a"), :2].tolist() == [0.0, 0.0]
    assert snap.arrays.gpu_mem_free[cache.slot_of("a"), :2].tolist() == [0.0, 0.0]
    snap.rollback(token)
    _assert_same(before, snap.arrays)
    _assert_same(cache_before, cache.arrays)


def test_nested_what_ifs_and_keep() -> None:
    cache = _cache(objects.node("a"), objects.node("b"))
    snap = cache.snapshot()
    a, b = cache.slot_of("a"), cache.slot_of("b")
    before = _state(snap.arrays)
    outer = snap.checkpoint()
    snap.place(snap.placement(api_pod.parse_pod(objects.pod("p1", cpu="1")), a, ()))
    after_outer_place = _state(snap.arrays)
    inner = snap.checkpoint()
    snap.place(snap.placement(api_pod.parse_pod(objects.pod("p2", cpu="2")), b, ()))
    snap.rollback(inner)
    _assert_same(after_outer_place, snap.arrays)
    inner = snap.checkpoint()
    snap.place(snap.placement(api_pod.parse_pod(objects.pod("p3", cpu="3")), b, ()))
    snap.keep(inner)  # kept, but the outer what-if can still undo it
    assert snap.arrays.used[b, layout.CPU] == 3000
    snap.rollback(outer)
    _assert_same(before, snap.arrays)

    token = snap.checkpoint()
    snap.place(snap.placement(api_pod.parse_pod(objects.pod("p4", cpu="4")), a, ()))
    snap.keep(token)
    assert snap.arrays.used[a, layout.CPU] == 4000
    # The next snapshot is the cache again: what-ifs never leak into the cluster.
    assert cache.snapshot().arrays.used[a, layout.CPU] == 0


def test_a_rollback_undoes_every_change_of_its_what_if_in_one_log_whatever_list_it_changed() -> None:
    cache = _cache(objects.node("a"))
    snap = cache.snapshot()
    first, second = api_dra.ClaimAllocation("ns/c1"), api_dra.ClaimAllocation("ns/c2")
    binding = api_volumes.ClaimBinding("ns/v1", "a")
    pod = api_pod.parse_pod(objects.pod("p", cpu="1"))
    outer = snap.checkpoint()
    snap.pick_devices([first])
    snap.pick_volumes([binding])
    inner = snap.checkpoint()
    # The inner what-if takes out a choice the outer one made (a victim's claim freed), and makes its own.
    snap.unpick_devices([first])
    snap.unpick_volumes([binding])
    snap.pick_devices([second])
    snap.place(snap.placement(pod, 0, ()))
    assert (list(snap.device_picks), list(snap.volume_picks), len(snap.what_if_pods)) == ([second], [], 1)
    snap.rollback(inner)
    # Exactly the outer what-if's state again (the old per-list marks only cut the lists back, and lost `first`).
    assert (list(snap.device_picks), list(snap.volume_picks), list(snap.what_if_pods)) == ([first], [binding], [])
    snap.rollback(outer)
    assert (list(snap.device_picks), list(snap.volume_picks), snap.in_what_if) == ([], [], False)


def test_a_snapshot_changes_only_inside_a_what_if() -> None:
    cache = _cache(objects.node("a"))
    snap = cache.snapshot()
    placement = snap.placement(api_pod.parse_pod(objects.pod("p")), 0, ())
    with pytest.raises(RuntimeError):
        snap.place(placement)
    with pytest.raises(RuntimeError):
        snap.keep(0)
    snap.checkpoint()
    with pytest.raises(RuntimeError, match="still open"):
        cache.snapshot()


def test_rollback_after_a_pod_asks_for_a_resource_never_seen() -> None:
    cache = _cache(objects.node("a"))
    snap = cache.snapshot()
    before = _state(snap.arrays)
    token = snap.checkpoint()
    snap.place(snap.placement(api_pod.parse_pod(objects.pod("p", cpu="1")), 0, ()))
    vector = snap.request_vector(api_pod.parse_pod(objects.pod("q", extra={"example.com/new": "1"})))
    assert vector.shape[0] == snap.arrays.cap.shape[1] == len(snap.columns)
    snap.rollback(token)
    np.testing.assert_array_equal(snap.arrays.used[:, : before[0].shape[1]], before[0])
    assert not snap.arrays.used[:, before[0].shape[1] :].any()
