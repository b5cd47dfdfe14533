"""``gpusched run``: the operator process. Connects, serves health and metrics, elects a leader, watches, schedules.

Tasks on one event loop: the pod and node informers and kopf's watchers (feeding :class:`Operator`), the
scheduling task, the leader elector,
the writers (binder, Events, status) and the two HTTP servers. SIGTERM or SIGINT stops them in an order that
hands over quickly: stop scheduling, release the lease, stop the watches, finish bindings already sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import time
from typing import Any

import kopf
import structlog

from scheduler.k8s import client as k8s_client
from scheduler.k8s import config as k8s_config
from scheduler.k8s import handlers, health, logs
from scheduler.k8s.informer import Informer
from scheduler.k8s.leader import LeaderElector
from scheduler.k8s.operator import Operator, warm_kernels

log = structlog.get_logger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="a kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
    parser.add_argument("--context", help="a context of the kubeconfig (default: its current context)")
    parser.add_argument("--config", help="the scheduler's YAML config file (see docs/operator.md)")
    parser.add_argument(
        "--namespace", default="gpusched-system", help="where the leader-election Lease lives (must exist)"
    )
    parser.add_argument("--lease-name", default="gpusched", help="the coordination.k8s.io Lease name")
    parser.add_argument("--identity", help="this replica's name in the Lease (default: hostname-pid)")
    parser.add_argument("--metrics-port", type=int, default=8080, help="/metrics port (0: pick a free one)")
    parser.add_argument("--health-port", type=int, default=8081, help="/healthz, /readyz, /leader (0: pick one)")
    parser.add_argument("--log-format", choices=("auto", "json", "console"), default="auto")


def main(args: argparse.Namespace) -> int:
    logs.configure(args.log_format)
    config = k8s_config.load(args.config)  # bad config: InvalidObject, reported by the CLI before any I/O
    asyncio.run(serve(args, config))
    return 0


async def serve(args: argparse.Namespace, config: k8s_config.OperatorConfig) -> None:
    client_settings = k8s_client.ClientSettings(
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        context=args.context,
        qps=config.binding.qps,
        burst=config.binding.burst,
        timeout=config.binding.timeout_s,
        connections=config.binding.concurrency + 16,
    )
    # Before anything else: in a thread, so that the process answers signals meanwhile. Not overlapped with the
    # listings: both hold the GIL, and overlapping made the start slower (docs/operator.md).
    started = time.monotonic()
    placed = await asyncio.to_thread(warm_kernels, config)
    log.info("kernels ready", seconds=round(time.monotonic() - started, 2), placed=placed)
    client = await k8s_client.connect(client_settings)
    identity = args.identity or f"{socket.gethostname()}-{os.getpid()}"
    operator = Operator(client, config, identity=identity)
    await operator.start()
    servers = await health.serve(operator, health_port=args.health_port, metrics_port=args.metrics_port)
    log.info("serving", health_port=servers.health_port, metrics_port=servers.metrics_port, identity=identity)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    kopf_stop = asyncio.Event()
    tasks: dict[str, asyncio.Task[Any]] = {
        "scheduling": asyncio.create_task(operator.run(), name="gpusched scheduling"),
        "watches": asyncio.create_task(
            kopf.operator(
                registry=handlers.registry(operator, client_settings),
                settings=handlers.settings(),
                clusterwide=True,
                standalone=True,
                stop_flag=kopf_stop,
            ),
            name="gpusched watches",
        ),
    }
    informers = {
        "nodes": Informer(
            client,
            kind="nodes",
            list_method=client.core.list_node,
            on_event=operator.node_event,
            known=lambda: list(operator.nodes),
            on_listed=operator.part_listed,
        ),
        "pods": Informer(
            client,
            kind="pods",
            list_method=client.core.list_pod_for_all_namespaces,
            on_event=operator.pod_event,
            known=operator.held_pods,
            on_listed=operator.part_listed,
        ),
    }
    for kind, informer in informers.items():
        tasks[kind] = asyncio.create_task(informer.run(), name=f"gpusched {kind}")
    if config.leader_election.enabled:
        elector = LeaderElector(
            client,
            namespace=args.namespace,
            name=args.lease_name,
            identity=identity,
            config=config.leader_election,
            on_change=operator.set_leading,
        )
        tasks["lease"] = asyncio.create_task(elector.run(), name="gpusched lease")
    else:
        operator.set_leading(True)

    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopper, *tasks.values()], return_when=asyncio.FIRST_COMPLETED)
    for name, task in tasks.items():
        if task in done and not task.cancelled() and task.exception() is not None:
            log.error("task failed; stopping", task=name, error=repr(task.exception()))
    log.info("stopping")
    operator.set_leading(False)
    for name in ("lease", "scheduling", "nodes", "pods"):
        if name in tasks:
            tasks[name].cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await tasks[name]
    kopf_stop.set()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(tasks["watches"], 10)
    stopper.cancel()
    await operator.close()
    await servers.close()
    await client.close()
