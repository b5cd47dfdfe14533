"""CPU and memory of feeding a first listing of bound pods to the operator, outside a cluster: where a large
cluster's start goes once the API server has answered.

The pods and nodes are benchmarks/startup.py's (6 one-GPU and 4 CPU-only pods a node, placed by another
scheduler), as the API server lists them: with the defaults it adds (the two DefaultTolerationSeconds
tolerations, QoS class, termination settings) and a managedFields entry, about 1.7 KB of JSON a pod. They are
encoded in pages of 500, then decoded and handed to an :class:`~scheduler.k8s.operator.Operator`'s ``node_event``
and ``pod_event`` one by one, as the informer does, after ``gc.freeze()`` as ``gpusched run`` does once the
kernels are warm. Prints the CPU seconds of the nodes and of the pods and how much the process grew;
``--collector off`` keeps Python's collector off meanwhile (as ``gpusched run`` does until its first listings are
in), ``--profile`` prints cProfile's top functions. ``--parse`` times the pod's parse alone instead
(``scheduler.api.objects.pod.parse_pod`` over the first 5,000 pods, decoded once, best of 5 passes: µs a pod).

Run: ``.venv/bin/python -m benchmarks.listing_feed [--nodes 5000 --pods 90000] [--collector off] [--profile]``
     ``.venv/bin/python -m benchmarks.listing_feed --parse``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import time
from typing import Any

PAGE = 500


def _managed(fields: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "manager": "benchmark",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-12-06T20:29:57Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    ]


def pod(i: int, *, per_node: int) -> dict[str, Any]:
    """The ``i``-th bound pod as listed: a GPU pod for 6 of each 10 on a node, a CPU-only one for the rest."""
    gpu = i % per_node < per_node * 6 // 10
    requests = {"cpu": "1", "memory": "1Gi", **({"nvidia.com/gpu": "1"} if gpu else {})}
    resources: dict[str, Any] = {"requests": requests, **({"limits": {"nvidia.com/gpu": "1"}} if gpu else {})}
    container_fields: dict[str, Any] = {
        f"f:{name}": {} for name in ("image", "imagePullPolicy", "name", "terminationMessagePath")
    }
    container_fields["f:resources"] = {"f:requests": {f"f:{name}": {} for name in requests}}
    spec_fields: dict[str, Any] = {
        f"f:{name}": {} for name in ("dnsPolicy", "nodeName", "restartPolicy", "schedulerName")
    }
    return {
        "metadata": {
            "name": f"run-{i}",
            "namespace": "default",
            "uid": f"{i:08x}-e12e-4c07-9742-273cee6197e0",
            "resourceVersion": str(5000 + i),
            "generation": 1,
            "creationTimestamp": "2026-12-06T20:29:57Z",
            "managedFields": _managed(
                {"f:spec": {"f:containers": {'k:{"name":"main"}': container_fields}, **spec_fields}}
            ),
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/app:latest",
                    "resources": resources,
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "Always",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "nodeName": f"gpu-{i // per_node}",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{k}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for k in ("not-ready", "unreachable")
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def node(i: int) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}
    name = f"gpu-{i}"
    return {
        "metadata": {
            "name": name,
            "uid": f"{i:08x}-aaaa-4c07-9742-273cee6197e0",
            "resourceVersion": str(200 + i),
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": _managed({"f:metadata": {"f:labels": {"f:kubernetes.io/hostname": {}, "f:type": {}}}}),
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def _pages(items: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps({"items": items[s : s + PAGE]}).encode() for s in range(0, len(items), PAGE)]


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def _feed(args: argparse.Namespace) -> None:
    import scheduler.k8s.run  # noqa: F401  (the operator's imports, as at its start)
    from scheduler.k8s import config as k8s_config
    from scheduler.k8s.operator import Operator
    from tests.k8s.fakeapi import client_for

    client = client_for("http://127.0.0.1:9")  # never asked: the events are handed to the operator here
    operator = Operator(client, k8s_config.parse({}), identity="benchmark")
    await operator.start()
    per_node = max(1, args.pods // args.nodes)
    node_pages = _pages([node(i) for i in range(args.nodes)])
    pod_pages: list[bytes] = []
    for start in range(0, args.pods, 10 * PAGE):
        pod_pages += _pages([pod(i, per_node=per_node) for i in range(start, min(start + 10 * PAGE, args.pods))])
    gc.collect()
    gc.freeze()
    before = _rss_mib()
    if args.collector == "off":
        gc.disable()
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    started = time.process_time()
    for raw in node_pages:
        for item in json.loads(raw)["items"]:
            operator.node_event(item)
    nodes_done = time.process_time()
    for raw in pod_pages:
        for item in json.loads(raw)["items"]:
            operator.pod_event(item)
    pods_done = time.process_time()
    if profile is not None:
        profile.disable()
    gc.enable()
    size = sum(map(len, pod_pages)) / args.pods
    print(f"{args.nodes} nodes: {nodes_done - started:.2f} s of CPU")
    print(f"{args.pods} pods ({size:.0f} bytes of JSON each): {pods_done - nodes_done:.2f} s of CPU")
    print(f"the process grew by {_rss_mib() - before:.0f} MiB (collector {args.collector})")
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
    await operator.close()
    await client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=90000)
    parser.add_argument("--collector", choices=("on", "off"), default="on")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--parse", action="store_true", help="time the pod's parse alone (µs a pod)")
    args = parser.parse_args()
    if args.parse:
        us = _parse_us(min(args.pods, 5000), per_node=max(1, args.pods // args.nodes))
        print(f"parse_pod: {us:.2f} µs a pod (best of 5 passes)")
    else:
        asyncio.run(_feed(args))
    return 0


def _parse_us(count: int, *, per_node: int) -> float:
    """CPU µs a pod of ``parse_pod`` over ``count`` listed pods (decoded once), the best of 5 passes."""
    from scheduler.api.objects.pod import parse_pod

    pods = [json.loads(json.dumps(pod(i, per_node=per_node))) for i in range(count)]
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for raw in pods:
            parse_pod(raw)
        best = min(best, time.process_time() - started)
    return best / count * 1e6


if __name__ == "__main__":
    raise SystemExit(main())
