"""The smallest possible binder: the API server's ceiling for binding pods, against which schedulers are measured.

It decides nothing: it lists the pending pods of one namespace that name ``--scheduler-name``, lists the nodes,
and posts one ``pods/binding`` per pod, round-robin over the nodes, ``--concurrency`` requests in flight, with no
Events, no status writes, no watch and no client-side rate limit. With ``--events`` it also posts one ``Scheduled``
Event per pod after its binding, as a scheduler does (``benchmarks/e2e_throughput.py``'s ``ceiling-events``
case): the ceiling of a binder that writes what gpusched and kube-scheduler write per pod. Whatever rate it
reaches is what the API server (and etcd) on this machine can take, so a scheduler's pods/s over this one's,
measured in the same run on the same cluster shape, is the fraction of the ceiling it reaches.
``benchmarks/e2e_throughput.py`` runs it as its ``ceiling`` case, as a process of its own like the schedulers.

    python -m benchmarks.null_binder --server URL --ca CA --cert CRT --key KEY --namespace NS [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import ssl
import sys
from typing import Any

import aiohttp


async def bind_all(args: argparse.Namespace) -> int:
    context = ssl.create_default_context(cafile=args.ca)
    context.load_cert_chain(args.cert, args.key)
    connector = aiohttp.TCPConnector(ssl=context, limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def get(path: str, **query: str) -> Any:
            async with session.get(args.server + path, params=query) as resp:
                resp.raise_for_status()
                return await resp.json()

        pods = [
            p["metadata"]["name"]
            for p in (await get(f"/api/v1/namespaces/{args.namespace}/pods"))["items"]
            if p["spec"].get("schedulerName") == args.scheduler_name and not p["spec"].get("nodeName")
        ]
        nodes = [n["metadata"]["name"] for n in (await get("/api/v1/nodes"))["items"]]
        todo = list(zip(pods, itertools.cycle(nodes), strict=False))
        failed = 0

        async def worker() -> None:
            nonlocal failed
            while todo:
                pod, node = todo.pop()
                body = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": pod, "namespace": args.namespace},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                }
                path = f"/api/v1/namespaces/{args.namespace}/pods/{pod}/binding"
                failed += not await post(path, body)
                if args.events:
                    await post(
                        f"/api/v1/namespaces/{args.namespace}/events", scheduled_event(args.namespace, pod, node)
                    )

        async def post(path: str, body: Any) -> bool:
            for attempt in range(20):
                async with session.post(args.server + path, json=body) as resp:
                    await resp.read()
                    if resp.status != 429:  # the API server's priority and fairness: slow down and retry
                        return resp.status in (200, 201)
                await asyncio.sleep(0.05 * (attempt + 1))
            return False

        async with asyncio.TaskGroup() as group:
            for _ in range(args.concurrency):
                group.create_task(worker())
        print(f"null binder: {len(pods) - failed} of {len(pods)} pods bound on {len(nodes)} nodes", file=sys.stderr)
        return 0 if failed == 0 else 1


def scheduled_event(namespace: str, pod: str, node: str) -> dict[str, Any]:
    """The ``Scheduled`` Event a scheduler writes for a pod it bound (core/v1, as gpusched writes them)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod}.", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": pod},
        "reason": "Scheduled",
        "message": f"Successfully assigned {namespace}/{pod} to {node}",
        "type": "Normal",
        "source": {"component": "null-binder"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduler-name", default="null-binder")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--events", action="store_true", help="post a Scheduled Event per pod after its binding")
    return asyncio.run(bind_all(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
