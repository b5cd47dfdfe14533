"""A restart, as the operator sees it: objects listed again in any order, and the queues' state derived anew.

Reproduces what a ``kill -9`` and a restart broke (issue 12): running gang members charged to ``default`` instead
of their PodGroup's queue because they were listed before it, a queue's limit crossed, and a bound pod with a
malformed annotation dropped from its node.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from scheduler.k8s import config as k8s_config
from scheduler.k8s.operator import Operator
from tests.k8s.fakeapi import FakeApiServer, eventually
from tests.k8s.test_operator import bound, events, flushed, node, pod

CAPPED = {"metadata": {"name": "capped", "uid": "uid-capped"}, "spec": {"limit": {"nvidia.com/gpu": "8"}}}
GROUP = {
    "metadata": {"name": "train", "namespace": "default", "uid": "uid-train"},
    "spec": {"minMember": 2, "queue": "capped"},
}


def _members() -> list[dict[str, Any]]:
    return [pod(f"train-{i}", 4, node_name=f"gpu-{i}", labels={"gpusched.io/pod-group": "train"}) for i in range(2)]


ORDERS = list(itertools.permutations(("pods", "group", "queue")))


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
async def test_after_a_restart_the_queue_limit_holds_in_any_listing_order(
    fake: FakeApiServer, operator: Operator, order: tuple[str, ...]
) -> None:
    # Queue 'capped' (limit 8 GPUs) runs a 2 x 4-GPU gang; gpusched restarts and lists everything again.
    operator.set_leading(True)
    for i in range(2):
        operator.node_event(node(f"gpu-{i}", gpus=8))
    feeds = {
        "pods": lambda: [operator.pod_event(member) for member in _members()],
        "group": lambda: operator.podgroup_event(GROUP),
        "queue": lambda: operator.queue_event(CAPPED),
    }
    for part in order:
        feeds[part]()
    operator.listed()
    # The same pod refused before the restart is refused after it.
    operator.pod_event(pod("one", 1, labels={"gpusched.io/queue": "capped"}))
    await eventually(lambda: bool(events(fake, "FailedScheduling")))
    assert bound(fake) == {}
    assert (
        "queue 'capped' would hold 9 nvidia.com/gpu, above its ceiling 8"
        in events(fake, "FailedScheduling")[0]["message"]
    )
    operator.publish_status()
    await flushed(operator)
    written = fake.requests("PATCH", "/queues/capped/status")[-1].body["status"]
    assert written["allocated"]["nvidia.com/gpu"] == "8"
    assert "gpusched_queue_allocated" in operator.metrics.exposition().decode()
    assert operator.loop.held("default").get("nvidia.com/gpu", 0.0) == 0.0


async def test_the_podgroup_coming_after_readiness_moves_its_members_to_its_queue(
    fake: FakeApiServer, operator: Operator
) -> None:
    # The watch may deliver a PodGroup after its running members, even after the first listing.
    operator.set_leading(True)
    for i in range(2):
        operator.node_event(node(f"gpu-{i}", gpus=8))
    operator.queue_event(CAPPED)
    for member in _members():
        operator.pod_event(member)
    operator.listed()
    assert operator.loop.held("default")["nvidia.com/gpu"] == 8.0
    operator.podgroup_event(GROUP)
    assert operator.loop.held("capped")["nvidia.com/gpu"] == 8.0
    assert operator.loop.held("default").get("nvidia.com/gpu", 0.0) == 0.0


async def test_a_bound_pod_with_a_malformed_annotation_still_holds_its_gpus(
    fake: FakeApiServer, operator: Operator
) -> None:
    # A running 8-GPU pod is given a malformed gpusched.io annotation after it was bound; gpusched restarts. Its
    # GPUs must not be handed out again (12 GPUs were bound on an 8-GPU node that way).
    operator.set_leading(True)
    operator.node_event(node("gpu-0", gpus=8))
    running = pod("running", 8, node_name="gpu-0")
    running["metadata"]["annotations"] = {"gpusched.io/gpu-model": "A100|", "gpusched.io/gpu-ids": "0,1,2,3,4,5,6,7"}
    operator.pod_event(running)
    operator.listed()
    operator.pod_event(pod("next", 4))
    await eventually(lambda: bool(events(fake, "FailedScheduling")))
    assert bound(fake) == {}
    await flushed(operator)
    invalid = events(fake, "InvalidObject")
    assert invalid and "gpusched.io/gpu-model" in invalid[0]["message"]
    # A shared GPU whose share can no longer be read counts as the whole GPU (the safe side).
    shared = pod("shared", 0, node_name="gpu-0")
    shared["metadata"]["annotations"] = {"gpusched.io/gpu-milli": "lots", "gpusched.io/gpu-ids": "0"}
    operator.pod_event(running, deleted=True)
    operator.pod_event(shared)
    entry = operator.cache.pod("default/shared")
    assert entry is not None and entry.pod.gpu.whole and entry.pod.gpu.count == 1


async def test_a_queue_counts_an_edited_bound_pod_as_a_restarted_replica_reads_it(
    fake: FakeApiServer, operator: Operator, client: Any
) -> None:
    # The fault test (seed 1): a bound 500-milli pod was edited to a malformed gpu-memory after the last restart;
    # the leader kept counting 0.5 GPU in its queue while a replica started afterwards reads it as the whole GPU.
    # Both must count what the pod says now.
    def shared(memory: str | None) -> dict[str, Any]:
        manifest = pod("shared", 0, node_name="gpu-0", labels={"gpusched.io/queue": "q"})
        manifest["metadata"]["annotations"] = {"gpusched.io/gpu-milli": "500", "gpusched.io/gpu-ids": "0"}
        if memory is not None:
            manifest["metadata"]["annotations"]["gpusched.io/gpu-memory"] = memory
        return manifest

    def gpus(op: Operator) -> float:
        return op.loop.queue_statuses()["q"].allocated.get("nvidia.com/gpu", 0.0)

    queue = {"metadata": {"name": "q", "uid": "uid-q"}, "spec": {}}
    operator.node_event(node("gpu-0", gpus=8))
    operator.queue_event(queue)
    operator.pod_event(shared(None))
    operator.listed()
    assert gpus(operator) == 0.5
    operator.pod_event(shared("lots"))

    restarted = Operator(client, k8s_config.parse({}), identity="restarted")
    restarted.node_event(node("gpu-0", gpus=8))
    restarted.queue_event(queue)
    restarted.pod_event(shared("lots"))
    restarted.listed()
    assert gpus(restarted) == 1.0
    assert gpus(operator) == gpus(restarted)
