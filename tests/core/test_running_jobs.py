"""The running jobs kept per job (``scheduler.core.running_jobs``) are, after any sequence of changes, what a build
from scratch gives: the same candidates, the same arrays per candidate, the same queue shares."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler.api.crds.podgroup import PodGroup
from scheduler.api.crds.queue import QueueSpec
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.core.loop import SchedulingLoop
from scheduler.core.preemption.preemptor import Preemptor
from scheduler.core.running_jobs import Running, RunningJobs
from scheduler.queue.scheduling import SchedulingQueue
from tests.api import objects
from tests.core.harness import Clock, Cluster, Events

NODES = 3
PODS = 8
GROUPS = ("g0", "g1")
QUEUES = ("qa", "qb")

node_index = st.integers(min_value=0, max_value=NODES - 1)
pod_index = st.integers(min_value=0, max_value=PODS - 1)
group_index = st.integers(min_value=-1, max_value=len(GROUPS) - 1)  # -1: a single pod
queue_index = st.integers(min_value=0, max_value=len(QUEUES) - 1)
priority = st.sampled_from((0, 5, 10))

OPERATIONS = st.one_of(
    st.tuples(st.just("bind"), pod_index, node_index, group_index, queue_index, priority, st.integers(0, 2)),
    st.tuples(st.just("update"), pod_index, priority, st.integers(0, 9)),
    st.tuples(st.just("pending"), pod_index, group_index, queue_index),
    st.tuples(st.just("delete"), pod_index),
    st.tuples(st.just("finish"), pod_index),
    st.tuples(st.just("bind_failed"), pod_index, node_index, group_index, queue_index),
    st.tuples(st.just("group"), st.integers(0, len(GROUPS) - 1), st.integers(1, 3), st.integers(0, 4), queue_index),
    st.tuples(st.just("priority"), st.integers(0, len(GROUPS) - 1), priority),
    st.tuples(st.just("ungroup"), st.integers(0, len(GROUPS) - 1)),
    st.tuples(st.just("remove_node"), node_index),
    st.tuples(st.just("add_node"), node_index, st.integers(0, 2)),
    st.tuples(
        st.just("build"),
    ),
)


def _pod(i: int, node: str, group: int, queue: int, prio: int, gpus: int = 1, rank: int = 0) -> api_pod.PodRequest:
    labels = {"gpusched.io/queue": QUEUES[queue], "batch.kubernetes.io/job-completion-index": str(rank)}
    if group >= 0:
        labels["gpusched.io/pod-group"] = GROUPS[group]
    raw: dict[str, Any] = objects.pod(f"p{i}", gpus=gpus, labels=labels, node_name=node, phase="Running")
    raw["spec"]["priority"] = prio
    return api_pod.parse_pod(raw)


def _same(kept: Running, fresh: Running) -> None:
    """Equal whatever the order the candidates come in (no choice depends on it: every order a search sorts
    candidates in ends in their keys)."""
    assert sorted(c.key for c in kept.candidates) == sorted(c.key for c in fresh.candidates)
    assert dict(kept.ahead) == dict(fresh.ahead)
    by_key = {c.key: i for i, c in enumerate(fresh.candidates)}
    a, b = kept.placements, fresh.placements
    assert a.index == {c.key: i for i, c in enumerate(kept.candidates)}
    names_a = {i: q for q, i in a.queues.items()}
    names_b = {i: q for q, i in b.queues.items()}
    for i, candidate in enumerate(kept.candidates):
        j = by_key[candidate.key]
        assert candidate == fresh.candidates[j]
        assert (a.priority[i], a.behind[i], names_a[int(a.queue[i])]) == (
            b.priority[j],
            b.behind[j],
            names_b[int(b.queue[j])],
        )
        mine, theirs = a.owner == i, b.owner == j
        assert np.array_equal(a.slot[mine], b.slot[theirs])
        assert np.array_equal(a.rows[mine], b.rows[theirs])
        assert np.array_equal(a.whole[mine], b.whole[theirs])
    pairs_a = {(slot, a.candidates[i].key) for slot in a.by_slot for i in a.by_slot[slot]}
    pairs_b = {(slot, b.candidates[i].key) for slot in b.by_slot for i in b.by_slot[slot]}
    assert pairs_a == pairs_b == {(int(s), a.candidates[int(o)].key) for s, o in zip(a.slot, a.owner, strict=True)}


@settings(max_examples=300, deadline=None)
@given(st.lists(OPERATIONS, max_size=40))
# A node leaves with a job's pods on it, and comes back: no job changed, the nodes' generations did.
@example([("bind", 0, 0, -1, 0, 0, 0), ("build",), ("remove_node", 0), ("build",), ("add_node", 0, 2)])
@example([("bind", 0, 0, 0, 0, 0, 0), ("bind", 1, 1, 0, 0, 0, 1), ("build",), ("remove_node", 1)])
def test_the_kept_candidates_are_a_build_from_scratch(operations: list[tuple[Any, ...]]) -> None:
    cluster = Cluster([objects.node(f"n{i}", gpus=4) for i in range(NODES)])
    cache = cluster.cache
    clock = Clock()
    loop = SchedulingLoop(cluster.scheduler, SchedulingQueue(clock=clock), clock=clock, events=Events())
    loop.queues_changed([QueueSpec(name=q, guaranteed={"nvidia.com/gpu": 4}) for q in QUEUES])
    kept = loop.action_state(Preemptor).running_jobs
    groups: dict[int, PodGroup] = {}
    for operation in operations:
        clock.now += 1.0
        name, *args = operation
        if name == "bind":
            i, n, group, queue, prio, rank = args
            pod = _pod(i, f"n{n}", group, queue, prio, rank=rank)
            if (old := cache.pod(pod.key)) is not None and old.placement.slot != cache.slot_of(f"n{n}"):
                continue  # a pod never moves: it is deleted and comes back
            cache.upsert_pod(pod)
            loop.pod_placed(pod)
        elif name == "update":
            i, prio, rank = args
            entry = cache.pod(f"default/p{i}")
            if entry is None:
                continue
            labels = {**entry.pod.labels, "batch.kubernetes.io/job-completion-index": str(rank)}
            pod = dataclasses.replace(entry.pod, labels=labels, priority=prio)
            cache.upsert_pod(pod)
            loop.pod_placed(pod)
        elif name == "pending":
            i, group, queue = args
            if cache.pod(f"default/p{i}") is None:
                loop.pod_pending(_pod(i, "", group, queue, 0))
        elif name in ("delete", "finish"):
            key = f"default/p{args[0]}"
            cache.remove_pod(key)
            loop.pod_gone(key, finished="Succeeded" if name == "finish" else "")
        elif name == "bind_failed":
            i, n, group, queue = args
            pod = _pod(i, "", group, queue, 0)
            if cache.pod(pod.key) is not None or cache.slot_of(f"n{n}") is None:
                continue
            cache.assume(pod, f"n{n}")
            loop.pod_placed(pod)
            _same(kept.build(), RunningJobs(loop.jobs, cache, loop.tenancy).build())
            cache.forget(pod.key)
            loop.bind_failed(pod, "conflict")
        elif name == "group":
            g, min_member, extra, queue = args
            groups[g] = PodGroup(
                "default", GROUPS[g], min_member=min_member, max_member=min_member + extra, queue=QUEUES[queue]
            )
            loop.group_upsert(groups[g])
        elif name == "priority":
            g, prio = args
            if g in groups:
                groups[g] = dataclasses.replace(groups[g], priority=prio)
                loop.group_upsert(groups[g])
        elif name == "ungroup":
            groups.pop(args[0], None)
            loop.group_removed(f"default/{GROUPS[args[0]]}")
        elif name == "remove_node":
            cache.remove_node(f"n{args[0]}")
        elif name == "add_node":
            n, gpus = args
            cache.upsert_node(api_node.parse_node(objects.node(f"n{n}", gpus=2 + gpus)))
        else:
            _same(kept.build(), RunningJobs(loop.jobs, cache, loop.tenancy).build())
    _same(kept.build(), RunningJobs(loop.jobs, cache, loop.tenancy).build())
