"""The memo of searches that found nothing: each answer kept while its invalidation says it holds, one pod shape
for replicas, the cluster's generation moving on every change."""

from __future__ import annotations

import dataclasses
import operator

from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache
from scheduler.core import memo
from tests.api import objects


def _replica(name: str, **changes: object) -> api_pod.PodRequest:
    raw = objects.pod(name, gpus=2, labels={"app": "train"})
    raw["metadata"]["uid"] = f"uid-{name}"
    return dataclasses.replace(api_pod.parse_pod(raw), **changes)


def test_replicas_share_a_shape_and_what_decides_placement_tells_shapes_apart() -> None:
    a, b = _replica("a"), _replica("b", annotations={"note": "x"})
    assert memo.pod_shape(a) is not None
    assert memo.pod_shape(a) == memo.pod_shape(b)
    # Replicas come from their controller seconds apart: when a pod was made orders the queue, it places nothing.
    assert memo.pod_shape(a) == memo.pod_shape(dataclasses.replace(b, created=a.created + 30.0))
    assert memo.pod_shape(a) != memo.pod_shape(_replica("c", priority=5))
    assert memo.pod_shape(a) != memo.pod_shape(_replica("d", node_selector={"pool": "b"}))
    assert memo.pod_shape(a) != memo.pod_shape(_replica("e", labels={"app": "serve"}))
    assert memo.pod_shape(a) != memo.pod_shape(_replica("f", namespace="other"))


def test_a_pod_with_affinity_spread_and_ports_still_has_a_shape() -> None:
    raw = objects.pod("rich", gpus=1, labels={"app": "x"})
    raw["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    raw["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    ]
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    assert memo.pod_shape(api_pod.parse_pod(raw)) is not None


def test_what_was_found_holds_only_while_its_invalidation_says_so() -> None:
    fruitless: memo.Memo[str, int, int] = memo.Memo(operator.eq, limit=2)
    fruitless.keep("shape", 7)
    assert fruitless.recall("shape", 7) == 7 and fruitless.recall("other", 7) is None
    assert fruitless.recall("shape", 8) is None  # the cluster moved on: dropped
    assert "shape" not in fruitless and fruitless.dropped == 1 and fruitless.recalled == 1
    fruitless.keep("a", 8)
    fruitless.keep("b", 8)
    fruitless.keep("c", 8)  # past the limit: the oldest goes
    assert list(fruitless) == ["b", "c"]
    assert fruitless.last("b") == 8 and fruitless.recall("b", 9) is None and fruitless.last("b") is None
    fruitless.forget("c")
    assert len(fruitless) == 0 and fruitless.recall(None, 8) is None
    fruitless.keep(None, 8)  # a search that cannot be told apart is not kept
    assert len(fruitless) == 0


def test_the_generation_moves_when_a_pod_leaves_or_a_node_comes() -> None:
    cache = Cache()
    cache.upsert_node(api_node.parse_node(objects.node("n0", gpus=8)))
    raw = objects.pod("p", gpus=1, node_name="n0")
    cache.upsert_pod(api_pod.parse_pod(raw))
    first = memo.generation(cache.arrays)
    cache.remove_pod("default/p")
    second = memo.generation(cache.arrays)
    cache.upsert_node(api_node.parse_node(objects.node("n1", gpus=8)))
    assert first < second < memo.generation(cache.arrays)
