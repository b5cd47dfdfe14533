"""``gpusched explain POD|podgroup/NAME``: why a pod or a gang is pending, told from the cluster as it is now.

It lists nodes, pods, PodGroups and Queues once, builds the same cache and queue the operator builds (through
the same :class:`Operator` input methods, as a standby that never leads, so nothing is written), and then:

- for a pod: runs its filters on a snapshot and prints, per reason, how many nodes fail and which (a few names),
  the largest free GPU block for a GPU pod, its queue, its place in that queue and the queue's share, and what
  the scheduler last said (the PodScheduled condition);
- for a PodGroup: its members, ``minMember``, the status the scheduler wrote, and a what-if of placing the gang
  now (on a private copy of the cache: nothing is bound).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler.api import pod as api_pod
from scheduler.api.errors import InvalidObject
from scheduler.core import cycle, gang
from scheduler.core.cycle import Scheduler
from scheduler.framework.interface import CycleState
from scheduler.k8s import client as k8s_client
from scheduler.k8s import config as k8s_config
from scheduler.k8s.operator import Operator
from scheduler.k8s.status import PODGROUPS, QUEUES
from scheduler.kernels import layout

#: Node names shown per reason.
SHOWN = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="POD|podgroup/NAME", help="a pod name, or podgroup/NAME for a gang")
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("--kubeconfig", help="a kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
    parser.add_argument("--context", help="a context of the kubeconfig")
    parser.add_argument("--config", help="the scheduler's config file (its profile decides the filters)")


def main(args: argparse.Namespace) -> int:
    config = k8s_config.load(args.config)
    text = asyncio.run(_explain(args, config))
    print(text)
    return 0


async def _explain(args: argparse.Namespace, config: k8s_config.OperatorConfig) -> str:
    settings = k8s_client.ClientSettings(
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None, context=args.context, qps=0
    )
    client = await k8s_client.connect(settings)
    try:
        operator = Operator(client, config, identity="explain")
        await _load(client, operator)
        operator.listed()
        word, _, name = args.target.partition("/")
        if name and word.lower() in ("podgroup", "podgroups", "pg"):
            return await _explain_group(client, operator, f"{args.namespace}/{name}")
        return await _explain_pod(client, operator, f"{args.namespace}/{args.target}")
    finally:
        await client.close()


async def _list(client: k8s_client.Client, method: Any, *args: Any) -> list[Mapping[str, Any]]:
    items: list[Mapping[str, Any]] = []
    token = None
    while True:
        answer = (
            await client.call(method, *args, limit=500, _continue=token)
            if token
            else await client.call(method, *args, limit=500)
        )
        if not answer.ok:
            raise InvalidObject(f"listing failed: HTTP {answer.status} {answer.message}", obj="cluster")
        items.extend(i for i in answer.body.get("items", []) if isinstance(i, Mapping))
        token = (answer.body.get("metadata") or {}).get("continue")
        if not token:
            return items


async def _load(client: k8s_client.Client, operator: Operator) -> None:
    core, custom = client.core, client.custom
    for body in await _list(client, core.list_node):
        operator.node_event(body)
    for body in await _list(client, core.list_pod_for_all_namespaces):
        operator.pod_event(body)
    for resource, feed in ((PODGROUPS, operator.podgroup_event), (QUEUES, operator.queue_event)):
        try:
            bodies = await _list(
                client, custom.list_cluster_custom_object, resource.group, resource.version, resource.plural
            )
        except InvalidObject:
            bodies = []  # CRD not installed: no groups, no queues
        for body in bodies:
            feed(body)


async def _explain_pod(client: k8s_client.Client, operator: Operator, key: str) -> str:
    namespace, _, name = key.partition("/")
    answer = await client.call(client.core.read_namespaced_pod, name=name, namespace=namespace)
    if answer.status == 404:
        raise InvalidObject("no such pod", obj=f"pod {key}")
    raw = answer.body
    pod = api_pod.parse_pod(raw)
    lines = [f"pod {key}"]
    if pod.node_name:
        return "\n".join([*lines, f"  bound to node {pod.node_name}: not pending"])
    if pod.scheduler_name != api_pod.SCHEDULER_NAME:
        return "\n".join([*lines, f"  schedulerName is {pod.scheduler_name!r}: not gpusched's pod"])
    for condition in (raw.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            lines.append(f"  last said: {condition.get('reason', '')}: {condition.get('message', '')}")
    lines += _filters(operator, pod)
    lines += _queue_lines(operator, pod)
    return "\n".join(lines)


def _filters(operator: Operator, pod: api_pod.PodRequest) -> list[str]:
    snapshot = operator.cache.snapshot()
    framework = operator.scheduler.framework
    state = CycleState(pod=pod, snapshot=snapshot, request=snapshot.request_vector(pod))
    for pre in framework.pre_filters:
        status = pre.pre_filter(state)
        if not status.ok:
            return [f"  {status.message}"]
    reasons = snapshot.arrays.base_reason.copy()
    for plugin in framework.filters:
        plugin.filter(state, reasons)
    names = snapshot.names
    failing: dict[str, list[str]] = defaultdict(list)
    fit = 0
    for slot, code in enumerate(reasons.tolist()):
        node = names[slot] if slot < len(names) else None
        if node is None or code == layout.ABSENT:
            continue
        if code == layout.FIT:
            fit += 1
        else:
            failing[cycle.reason_text(code, snapshot.columns)].append(node)
    total = fit + sum(len(v) for v in failing.values())
    lines = [f"  nodes: {fit} of {total} pass every filter"]
    for reason, nodes in sorted(failing.items(), key=lambda kv: -len(kv[1])):
        more = f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
        lines.append(f"    {len(nodes)} {reason}: {', '.join(sorted(nodes)[:SHOWN])}{more}")
    if pod.gpu.whole and pod.gpu.count:
        a = snapshot.arrays
        usable = np.flatnonzero(a.base_reason == layout.FIT)
        free = (a.gpu_free[usable] >= layout.WHOLE).sum(axis=1) if usable.size else np.zeros(0, dtype=np.int64)
        best = int(free.max()) if free.size else 0
        where = names[int(usable[int(free.argmax())])] if free.size and best else "no node"
        lines.append(
            f"  GPUs: it needs {pod.gpu.count} whole GPUs on one node; the most free on one node: {best} ({where})"
        )
        if fit == 0 and best < pod.gpu.count:
            lines.append(
                f"  to fit: {pod.gpu.count - best} more GPUs must free up on one node, or a node with"
                f" {pod.gpu.count} free GPUs must join"
            )
    return lines


def _queue_lines(operator: Operator, pod: api_pod.PodRequest) -> list[str]:
    loop = operator.loop
    job = loop.job_of(pod.key)
    leaf = loop.queue_of(pod)
    problem = loop.tenancy.problem(leaf)
    if problem:
        return [f"  queue: {problem}; the pod waits for it"]
    key = job.key if job is not None and job.group is not None and not job.satisfied else pod.key
    position = loop.queue.position(key)
    waiting = sum(1 for _, where in loop.queue.pending() if where == "active")
    status = loop.queue_statuses().get(leaf, {})
    allocated = loop.held(leaf)
    held = ", ".join(f"{v:g} {r}" for r, v in sorted(allocated.items()) if v) or "nothing"
    place = f"{position + 1} of {waiting}" if position is not None else "not in the active queue"
    return [
        f"  queue {leaf}: position {place}; holds {held}; share beyond guarantee over weight "
        f"{status.get('rankShare', '-')} (lower goes first); fair share {status.get('fairShare', '-')}"
    ]


async def _explain_group(client: k8s_client.Client, operator: Operator, key: str) -> str:
    loop = operator.loop
    state = loop.gang(key)
    if state is None or state.group is None:
        raise InvalidObject("no such PodGroup (or it could not be read)", obj=f"podgroup {key}")
    group = state.group
    lines = [
        f"podgroup {key}: minMember {group.min_member}, {len(state.pending)} pending and {len(state.placed)}"
        f" placed members, queue {state.queue}",
    ]
    namespace, _, name = key.partition("/")
    answer = await client.call(
        client.custom.get_namespaced_custom_object,
        PODGROUPS.group,
        PODGROUPS.version,
        namespace,
        PODGROUPS.plural,
        name,
    )
    for condition in (answer.body.get("status") or {}).get("conditions") or [] if answer.ok else []:
        lines.append(
            f"  {condition.get('type')}={condition.get('status')} {condition.get('reason', '')}:"
            f" {condition.get('message', '')}"
        )
    need = group.min_member - len(state.placed)
    if need <= 0:
        return "\n".join([*lines, "  the gang is placed; remaining members are placed one by one"])
    if len(state.pending) < need:
        return "\n".join([*lines, f"  waiting for members: {len(state.pending)} of the {need} still needed exist"])
    members = gang.order_members(list(state.pending.values()))[:need]
    what_if = Scheduler(operator.cache, operator.scheduler.framework, cycle.NoBinding())
    result = gang.place_gang(what_if, group, members)
    if result.status.ok:
        lines.append(f"  a placement exists now for {need} members: the gang waits its turn in the queue")
    else:
        lines.append(f"  placing {need} members together now fails: {result.status.message}")
    lines += _queue_lines(operator, members[0])
    return "\n".join(lines)
