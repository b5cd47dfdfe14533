"""The dashboard's cluster map at 5,000 nodes: build and render on the server, load and live update in Chromium, and
the CPU the dashboard takes while a page is open.

A cache of ``--nodes`` 8-GPU nodes (``--racks`` racks in blocks of 16 racks; about 60% of the nodes hold a 4-GPU
pod, one in ten a shared half GPU, in 8 queues) is built in this process. It prints:

- build: ``scheduler.dashboard.cluster_map`` reading every node (the cache's arrays, the FGD fragmentation), and
  its ``MapBuilder`` again after one pod was placed (only that node is read again);
- render: ``scheduler.dashboard.pages.cluster_map`` (the aggregated map past 400 nodes) and its size;
- in Chromium (``GPUSCHED_CHROMIUM`` or tests/e2e/build-chromium.sh): the page served by
  ``scheduler.dashboard.server`` loaded, from navigation to its load event; a pod placed in the cache, to the
  open page showing it (its poll is once a second); and the CPU seconds this process spent per wall-clock second
  while the page polled with nothing changing, and with one pod placed every second (each change rebuilds and
  re-renders the map once, whatever the number of viewers).

Run: ``.venv/bin/python -m benchmarks.dashboard_map`` (add ``--no-browser`` for the first two only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import Any

from scheduler.api.crds import topology as api_topology
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.cache.state import Cache
from scheduler.dashboard import cluster_map, pages, server, view

QUEUE = "gpusched.io/queue"
BLOCK = "network.topology.gpusched.io/block"
RACK = "network.topology.gpusched.io/rack"


def gpu_pod(name: str, node: str, *, gpus: int, queue: str, milli: int = 0) -> api_pod.PodRequest:
    annotations = {"gpusched.io/gpu-milli": str(milli)} if milli else {}
    return api_pod.parse_pod(
        {
            "metadata": {
                "name": name,
                "namespace": "bench",
                "uid": name,
                "labels": {QUEUE: queue},
                "annotations": annotations,
            },
            "spec": {
                "schedulerName": "gpusched",
                "nodeName": node,
                "containers": [
                    {"name": "m", "resources": {"requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": str(gpus)}}}
                ],
            },
            "status": {"phase": "Running"},
        }
    )


def build_cache(nodes: int, racks: int) -> Cache:
    cache = Cache()
    cache.set_topology(api_topology.TopologySpec(name="default", levels=(BLOCK, RACK), level_names=("block", "rack")))
    for i in range(nodes):
        rack = i % racks
        name = f"node-{i:05d}"
        cache.upsert_node(
            api_node.parse_node(
                {
                    "metadata": {"name": name, "labels": {BLOCK: f"b{rack // 16}", RACK: f"r{rack:03d}"}},
                    "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}},
                }
            )
        )
        if i % 10 < 6:
            cache.upsert_pod(gpu_pod(f"p-{i}", name, gpus=4, queue=f"team-{i % 8}"))
        if i % 10 == 9:
            cache.upsert_pod(gpu_pod(f"s-{i}", name, gpus=1, queue=f"team-{i % 8}", milli=500))
    return cache


class CacheSource:
    """The cache as the dashboard's source; its version changes when a pod is placed here."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.changes = 0
        self.maps = cluster_map.MapBuilder(cache)

    def version(self) -> str:
        return str(self.changes)

    def cluster_map(self) -> view.ClusterMap:
        return self.maps.build(queue_of=lambda p: p.labels.get(QUEUE, "default"))

    def queues(self) -> list[view.QueueRow]:
        return []

    def waiting(self) -> list[view.WaitingJob]:
        return []

    def job(self, kind: str, namespace: str, name: str) -> view.JobPage | None:
        return None

    def leadership(self) -> view.Leadership:
        return view.Leadership(leading=True)

    def history(self) -> list[view.Sample]:
        return []

    def place(self, index: int) -> None:
        node = f"node-{(index * 7919) % len(self.cache.nodes):05d}"
        self.cache.upsert_pod(gpu_pod(f"late-{index}", node, gpus=1, queue="late"))
        self.changes += 1


def timed(repeat: int, fn: Any) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - started)
    return best, value


async def in_browser(source: CacheSource, seconds: float) -> None:
    from tests.e2e.browser import Browser, chromium

    running = await server.serve(source, port=0, host="127.0.0.1")
    browser = await asyncio.to_thread(Browser, chromium())
    try:
        url = f"http://127.0.0.1:{running.port}/"
        loads = [await asyncio.to_thread(browser.goto, url) for _ in range(3)]
        print(f"chromium: page loaded in {min(loads):.2f} s (best of 3: {', '.join(f'{s:.2f}' for s in loads)})")

        def whole() -> int:
            return int(browser.evaluate("+document.getElementById('summary').dataset.whole"))

        shown = []
        for index in range(3):
            before = await asyncio.to_thread(whole)
            source.place(index)
            placed = time.monotonic()
            while await asyncio.to_thread(whole) == before:
                await asyncio.sleep(0.02)
            shown.append(time.monotonic() - placed)
        print(f"chromium: a placed pod shown after {max(shown):.2f} s at most ({', '.join(f'{s:.2f}' for s in shown)})")

        async def cpu_share(change: bool) -> float:
            started_cpu, started = time.process_time(), time.monotonic()
            index = 100
            while time.monotonic() - started < seconds:
                if change:
                    source.place(index)
                    index += 1
                await asyncio.sleep(1.0)
            return (time.process_time() - started_cpu) / (time.monotonic() - started)

        quiet = await cpu_share(False)
        busy = await cpu_share(True)
        print(
            f"CPU of this process (server, map builds; the browser is another process) over {seconds:.0f} s with the "
            f"map open: {100 * quiet:.1f}% of a core with nothing changing, {100 * busy:.1f}% with a pod placed every "
            "second"
        )
    finally:
        await asyncio.to_thread(browser.close)
        await running.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--racks", type=int, default=160)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each CPU figure is measured")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    source = CacheSource(build_cache(args.nodes, args.racks))
    print(f"cache of {args.nodes} nodes built in {time.perf_counter() - started:.1f} s")
    source.cluster_map()  # every node read (and the FGD kernel compiled)
    fresh_s, _ = timed(3, lambda: cluster_map.build(source.cache, queue_of=lambda p: "q"))
    source.place(-1)
    build_s, cluster = timed(1, source.cluster_map)
    render_s, html = timed(3, lambda: pages.cluster_map(cluster, view.Redacted()))
    print(
        f"map of every node: {1000 * fresh_s:.0f} ms (best of 3); again after one pod placed: {1000 * build_s:.0f} ms;"
        f" pages.cluster_map: {1000 * render_s:.0f} ms, {len(html) / 1024:.0f} KiB"
    )
    if not args.no_browser:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(in_browser(source, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
