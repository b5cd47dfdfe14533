"""The memo of searches that found nothing: held for a shape at one cluster generation, dropped when it moves."""

from __future__ import annotations

import dataclasses

from scheduler.api import node as api_node
from scheduler.api import pod as api_pod
from scheduler.cache.state import Cache
from scheduler.core import fruitless
from tests.api import objects


def _replica(name: str, **changes: object) -> api_pod.PodRequest:
    raw = objects.pod(name, gpus=2, labels={"app": "train"})
    raw["metadata"]["uid"] = f"uid-{name}"
    return dataclasses.replace(api_pod.parse_pod(raw), **changes)


def test_replicas_share_a_shape_and_what_decides_placement_tells_shapes_apart() -> None:
    a, b = _replica("a"), _replica("b", annotations={"note": "x"})
    assert fruitless.pod_shape(a) is not None
    assert fruitless.pod_shape(a) == fruitless.pod_shape(b)
    # Replicas come from their controller seconds apart: when a pod was made orders the queue, it places nothing.
    assert fruitless.pod_shape(a) == fruitless.pod_shape(dataclasses.replace(b, created=a.created + 30.0))
    assert fruitless.pod_shape(a) != fruitless.pod_shape(_replica("c", priority=5))
    assert fruitless.pod_shape(a) != fruitless.pod_shape(_replica("d", node_selector={"pool": "b"}))
    assert fruitless.pod_shape(a) != fruitless.pod_shape(_replica("e", labels={"app": "serve"}))
    assert fruitless.pod_shape(a) != fruitless.pod_shape(_replica("f", namespace="other"))


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
    assert fruitless.pod_shape(api_pod.parse_pod(raw)) is not None


def test_what_was_found_holds_only_at_its_generation() -> None:
    memo = fruitless.Fruitless()
    memo.record("shape", 7)
    assert memo.known("shape", 7) and not memo.known("other", 7)
    assert not memo.known("shape", 8)
    memo.record("other", 8)  # the cluster moved on: what was found at 7 is dropped
    assert len(memo) == 1 and not memo.known("shape", 7)
    memo.forget("other")
    assert not memo.known("other", 8)


def test_the_generation_moves_when_a_pod_leaves_or_a_node_comes() -> None:
    cache = Cache()
    cache.upsert_node(api_node.parse_node(objects.node("n0", gpus=8)))
    raw = objects.pod("p", gpus=1, node_name="n0")
    cache.upsert_pod(api_pod.parse_pod(raw))
    first = fruitless.generation(cache.arrays)
    cache.remove_pod("default/p")
    second = fruitless.generation(cache.arrays)
    cache.upsert_node(api_node.parse_node(objects.node("n1", gpus=8)))
    assert first < second < fruitless.generation(cache.arrays)
