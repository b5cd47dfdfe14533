"""``gpusched explain POD|podgroup/NAME|queue/NAME``: why a pod or a gang waits, or how a queue stands, told from
the running leader's live state.

Two halves:

- :func:`answer` runs inside the scheduler (``/explain`` on the health port, see ``scheduler.k8s.health``): it
  reads the operator's cache, queue and loop as they are now, on the event loop (so no cycle runs meanwhile),
  writes nothing, and takes milliseconds. A gang's what-if is placed on the cache's snapshot inside a checkpoint
  that is rolled back. Only the leader answers (a standby's queue does not move): 503 elsewhere.
- :func:`main` is the command (``gpusched explain``, or ``kubectl gpusched explain`` through :func:`kubectl_main`):
  it asks ``--url`` when given, else the scheduler's pods through the API server's pod proxy (no port-forward),
  the Lease's holder first, else the address the leader published on its Lease (a ``gpusched run`` outside the
  cluster: ``scheduler.k8s.leader``), and prints the answer on stdout; anything else (errors, timing) goes to
  stderr.

Nothing is told without a right, as on the dashboard (``scheduler.k8s.access``): ``/explain`` needs a bearer
token, which a TokenReview turns into a user, and a SubjectAccessReview that this user may ``get`` the object
explained (:meth:`Target.right`: the pod, the PodGroup in its namespace, the Queue); else 401 or 403 with a JSON
body naming what is missing. The command sends its kubeconfig user's token (a ``token``, or what an exec plugin or
auth provider gave the client library), or ``--token-file``'s: as ``Authorization: Bearer`` to an address, and as
:data:`TOKEN_HEADER` through the pod proxy, since the API server drops ``Authorization`` once it has authenticated
the caller.

Units are Kubernetes quantities (``2500m`` CPU, ``256Gi`` memory, ``0.5`` GPUs). The free-GPU figure counts only
nodes the pod may use (not tainted against it, selected, schedulable); a gang member says it waits for its gang.
The filtering and a gang's what-if are the cycle's own (``Scheduler.filter``, ``gang.try_gang``), with the nodes the
loop holds for other jobs, so explain cannot disagree with a cycle; work no node could ever hold as the cluster is
says so, and what would change it (``scheduler.core.capacity``), instead of what would have to free up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import numpy as np
from kubernetes_asyncio.client import CoordinationV1Api

from scheduler.api import pod as api_pod
from scheduler.api.errors import InvalidObject
from scheduler.api.podgroup import PodGroup
from scheduler.api.topology import TopologyConstraint
from scheduler.core import capacity, gang, reason_texts, registry
from scheduler.core.actions import consolidate
from scheduler.core.cycle import Context
from scheduler.core.loop import SchedulingLoop
from scheduler.k8s import access, logs
from scheduler.k8s import client as k8s_client
from scheduler.k8s import status as k8s_status
from scheduler.k8s.leader import EXPLAIN_URL_ANNOTATION
from scheduler.kernels import layout

if TYPE_CHECKING:
    from scheduler.k8s.operator import Operator

#: Node names shown per reason.
SHOWN = 5
#: The label of the scheduler's pods and the port of their health server (manifests/deployment.yaml).
POD_SELECTOR = "app.kubernetes.io/name=gpusched"
HEALTH_PORT = 8081
_GROUP_WORDS = ("podgroup", "podgroups", "pg")
_QUEUE_WORDS = ("queue", "queues", "gq", "q")
_POD_WORDS = ("pod", "pods", "po")
#: The header that carries the caller's token through the API server's pod proxy, which removes ``Authorization``
#: once it has authenticated the caller (k8s.io/apiserver's authentication filter): ``Bearer TOKEN``, as
#: ``Authorization`` (which a direct request, ``--url`` or the Lease's address, sends).
TOKEN_HEADER = "Gpusched-Authorization"


class NotFound(Exception):
    """The object named is not one the scheduler knows."""


# --- the server half -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """What is asked about: a pod or a PodGroup in a namespace, or a (cluster-wide) Queue."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def parse(cls, target: str, namespace: str = "default") -> Target:
        """``POD``, ``pod/NAME``, ``podgroup/NAME`` or ``queue/NAME`` (and their short words); NotFound for
        anything else."""
        word, _, name = target.partition("/")
        if not name:
            word, name = "pod", target
        word = word.lower()
        if word in _GROUP_WORDS:
            return cls("podgroup", namespace, name)
        if word in _QUEUE_WORDS:
            return cls("queue", "", name)
        if word in _POD_WORDS:
            return cls("pod", namespace, name)
        raise NotFound(f"cannot tell what {target!r} names: use POD, podgroup/NAME or queue/NAME")

    def right(self) -> dict[str, Any]:
        """The SubjectAccessReview attributes of the right to read this explanation: ``get`` on the object itself
        (a pod, a PodGroup in its namespace, a Queue), as ``kubectl get`` would need."""
        if self.kind == "pod":
            return access.pods_in(self.namespace, name=self.name)
        crd = k8s_status.PODGROUPS if self.kind == "podgroup" else k8s_status.QUEUES
        attributes = {"verb": "get", "group": crd.group, "resource": crd.plural, "name": self.name}
        if crd.namespaced:
            attributes["namespace"] = self.namespace
        return {"resourceAttributes": attributes}


def answer(operator: Operator, target: str, namespace: str = "default") -> str:
    """The explanation of ``target`` (``POD``, ``pod/NAME``, ``podgroup/NAME``, ``queue/NAME``); NotFound if the
    scheduler does not know it."""
    asked = Target.parse(target, namespace)
    if asked.kind == "podgroup":
        return explain_group(operator, f"{namespace}/{asked.name}")
    if asked.kind == "queue":
        return explain_queue(operator, asked.name)
    return explain_pod(operator, f"{namespace}/{asked.name}")


def explain_pod(operator: Operator, key: str) -> str:
    pod = operator.pending.get(key)
    lines = [f"pod {key}"]
    if pod is None:
        held = operator.cache.pod(key)
        if held is not None:
            node = operator.cache.snapshot().names[held.placement.slot]
            return "\n".join([*lines, f"  on node {node}: not pending"])
        unreadable = operator.unreadable_pods.get(key)
        if unreadable is not None:
            return "\n".join([*lines, f"  cannot be read: {unreadable[1]}"])
        raise NotFound(f"pod {key} is not a pending pod of gpusched (schedulerName: gpusched) that it knows")
    said = operator.conditions.said.get(key)
    if said:
        lines.append(f"  last said (PodScheduled=False Unschedulable): {said}")
    job = operator.loop.job_of(key)
    if job is not None and job.group is not None:
        group = job.group
        lines.append(
            f"  member of gang {group.key} (minMember {group.min_member}): {len(job.placed)} placed, {job.exists}"
            f" exist; it is placed only together with its gang (gpusched explain podgroup/{group.name}"
            f" -n {group.namespace})"
        )
    elif pod.pod_group:
        lines.append(f"  waits for its PodGroup {pod.namespace}/{pod.pod_group}, which does not exist")
    lines += _filters(operator, pod)
    if job is None or job.group is None:
        lines += _consolidation_lines(operator, _job_key(operator, pod), [pod], whole_gang=False, level=None)
    lines += _queue_lines(operator, pod)
    return "\n".join(lines)


def _consolidation_lines(
    operator: Operator, job_key: str, members: list[api_pod.PodRequest], *, whole_gang: bool, level: int | None
) -> list[str]:
    """The plan consolidation is carrying out for the job, the one it would carry out now, or why none exists (the
    action's own search, on the cycle's context); nothing when the profile does not consolidate."""
    loop = operator.loop
    action = next((a for a in loop.actions if isinstance(a, consolidate.Consolidate)), None)
    if action is None or loop.moves.mover is None:
        return []
    if job_key in loop.moves.plans:
        return [f"  consolidation: {loop.moves.why(job_key)}"]
    found = action.plan_for(
        members,
        operator.cache.snapshot(),
        whole_gang=whole_gang,
        priority=max(p.priority for p in members),
        level=level,
        context=_cycle_context(operator, job_key),
    )
    if found.plan is None:
        return [f"  consolidation cannot make room: {found.why}"]
    return [f"  consolidation would {found.plan.describe()}"]


def _cycle_context(operator: Operator, job_key: str) -> Context:
    """What the loop gives job ``job_key``'s cycles (``SchedulingLoop.cycle_context``): the nodes held for other jobs
    (nominations, reservations, the targets of moves), and the waiting demand some scores look ahead at."""
    return operator.loop.cycle_context(job_key)


def _job_key(operator: Operator, pod: api_pod.PodRequest) -> str:
    """The key the queue and the holds know ``pod``'s work by: its gang's while the gang is not placed."""
    job = operator.loop.job_of(pod.key)
    return job.key if job is not None and job.group is not None and not job.satisfied else pod.key


def _filters(operator: Operator, pod: api_pod.PodRequest) -> list[str]:
    snapshot = operator.cache.snapshot()
    # The cycle's own filtering (Scheduler.filter), with what the loop gives the cycle: the nodes held for other
    # jobs, and for a member placed after its gang, its siblings' nodes and topology domain.
    key = _job_key(operator, pod)
    context = _cycle_context(operator, key)
    job = operator.loop.job_of(pod.key)
    held = ""
    if job is not None and job.group is not None and (key == pod.key or job.placed):
        # Placed alone after its gang, or its gang placed again around members that still run: near them, inside
        # their domain and, in a segmented gang, its own segment's (gang.member_context, as the cycle gets it).
        pending = job.pending.values()
        context = gang.member_context(operator.scheduler, job.group, job.placed, context, member=pod, pending=pending)
        home = gang.segment_home(operator.scheduler, job.group, job.placed, member=pod, pending=pending)
        held = _segment_text(operator, job.group, home) if home is not None else ""
    filtered = operator.scheduler.filter(pod, snapshot, context)
    reasons = filtered.reasons
    if reasons is None:
        return [f"  {filtered.status.message}"]
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
            failing[reason_texts.node_text(snapshot, pod, code, slot)].append(node)
    total = fit + sum(len(v) for v in failing.values())
    lines = [f"  nodes: {fit} of {total} pass every filter"]
    for reason, nodes in sorted(failing.items(), key=lambda kv: -len(kv[1])):
        more = f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else ""
        lines.append(f"    {len(nodes)} {reason}: {', '.join(sorted(nodes)[:SHOWN])}{more}")
    if held:
        lines.append(f"  {held}")
    never = capacity.pod_never_fits(snapshot, pod, filtered.state.request, reasons) if fit == 0 else ""
    if never:
        return [*lines, f"  {never}"]
    if pod.gpu.whole and pod.gpu.count:
        a = snapshot.arrays
        codes = reasons[: len(names)]
        # A node refused only for want of room (its filter declares it so) still counts its free GPUs.
        eligible = np.flatnonzero(registry.REASONS.short_of_room(codes))
        free = (a.gpu_free[eligible] >= layout.WHOLE).sum(axis=1) if eligible.size else np.zeros(0, dtype=np.int64)
        best = int(free.max()) if free.size else 0
        where = names[int(eligible[int(free.argmax())])] if free.size and best else "no node"
        lines.append(
            f"  GPUs: it needs {pod.gpu.count} whole GPUs on one node; the most free on one node it may use"
            f" (taints, selectors, cordons considered): {best} ({where})"
        )
        if fit == 0 and eligible.size and best < pod.gpu.count:
            lines.append(
                f"  to fit: {pod.gpu.count - best} more GPUs must free up on such a node, or a node with"
                f" {pod.gpu.count} free GPUs it may use must join"
            )
    if fit == 0:
        lines.append("  it waits: what keeps it off each node above can change (room freed, holds released)")
    return lines


def _segment_text(operator: Operator, group: PodGroup, home: gang.SegmentHome) -> str:
    """What holds a replacement member of a segmented gang where its segment runs (the restriction its cycle gets
    from ``gang.member_context``), so that a node left out for it is not a mystery."""
    cache = operator.scheduler.cache
    names = cache.snapshot().names
    nodes = sorted({names[slot] or f"slot {slot}" for slot in home.anchor if slot < len(names)})
    shown = ", ".join(nodes[:SHOWN]) + (f" and {len(nodes) - SHOWN} more" if len(nodes) > SHOWN else "")
    each = f"spec.segments: {group.segment_size} members each"
    head = f"segment {home.index + 1} of {home.count}"
    if home.level is None:
        return f"{head} ({each}): the other members of its segment run on {shown}, which it prefers"
    level, label = cache.topology.level_label(home.level), cache.topology.levels[home.level]
    head += f" ({each}, required in one {level}): the other members of its segment run on {shown}"
    if home.domain < 0:
        return f"{head}, which have no label {label}: it is held to no {level}, only drawn to those nodes"
    entry = cache.nodes.get(home.anchor[0])
    value = entry.info.labels.get(label, "") if entry is not None else ""
    return f"{head}, so it may use only {level} {value} ({label}={value})"


def _amounts(vector: Mapping[str, float]) -> str:
    text = ", ".join(f"{name} {amount}" for name, amount in k8s_status.quantities(vector).items())
    return text or "nothing"


def _queue_status(loop: SchedulingLoop, name: str) -> Mapping[str, object]:
    """Queue ``name``'s status as its object shows it (empty if the queue is not in use)."""
    status = loop.queue_statuses().get(name)
    return k8s_status.queue_status(status) if status is not None else {}


def _queue_lines(operator: Operator, pod: api_pod.PodRequest) -> list[str]:
    loop = operator.loop
    job = loop.job_of(pod.key)
    leaf = loop.queue_of(pod)
    problem = loop.tenancy.problem(leaf)
    if problem:
        return [f"  queue: {problem}; the pod waits for it"]
    key = job.key if job is not None and job.group is not None and not job.satisfied else pod.key
    loop.sort_pending()  # the order as the next cycle will read it
    position = loop.queue.position(key)
    where = dict(loop.queue.pending()).get(key, "")
    waiting = sum(1 for _, w in loop.queue.pending() if w == "active")
    status = _queue_status(loop, leaf)
    if position is not None:
        place = f"position {position + 1} of {waiting} ready to be tried"
    elif where == "unschedulable":
        place = "waiting for a change in the cluster that may let it fit (node added, pod deleted, queue changed)"
    elif where == "backoff":
        place = "in backoff after a failed attempt"
    else:
        place = "not in the queue"
    return [
        f"  queue {leaf}: {place}; the queue holds {_amounts(loop.held(leaf))}; share beyond guarantee over weight"
        f" {status.get('rankShare', '-')} (lower goes first); fair share {status.get('fairShare', '-')}"
    ]


def explain_group(operator: Operator, key: str) -> str:
    loop = operator.loop
    state = loop.gang(key)
    if state is None or state.group is None:
        raise NotFound(f"podgroup {key}: no such PodGroup (or it could not be read)")
    group = state.group
    lines = [
        f"podgroup {key}: minMember {group.min_member}, {len(state.pending)} pending and {len(state.placed)}"
        f" placed members, queue {state.queue}, phase {state.phase}",
    ]
    for condition in state.conditions.values():
        lines.append(f"  {condition.type}={condition.status} {condition.reason}: {condition.message}")
    need = group.min_member - len(state.placed) - len(state.succeeded)
    if need <= 0:
        return "\n".join([*lines, "  the gang is placed; remaining members are placed one by one"])
    if len(state.pending) < need:
        return "\n".join(
            [
                *lines,
                f"  waiting for members: {len(state.pending)} of the {need} still needed exist; the gang is"
                " tried once they do",
            ]
        )
    members = gang.core_members(state.pending.values(), need)
    # The cycle's own what-if (gang.try_gang: the cheap checks, the topology's domains, the nodes held for others),
    # so what this says and the gang's Scheduled condition cannot disagree.
    context = gang.rejoin_context(
        operator.scheduler, group, state.placed, _cycle_context(operator, state.key), pending=state.pending.values()
    )
    result = gang.try_gang(operator.scheduler, group, members, context)
    if result.status.ok:
        nodes = sorted({d.node for d in result.decisions})
        kept = f", inside its topology ({_topology_text(group.topology)})" if group.topology else ""
        lines.append(
            f"  a placement exists now for {need} members (on {', '.join(nodes[:SHOWN])}"
            f"{' ...' if len(nodes) > SHOWN else ''}{kept}): the gang waits its turn in the queue"
        )
    else:
        lines.append(f"  placing {need} members together now fails: {result.status.message}")
        (level, _), _ = gang.resolve_levels(operator.scheduler, group.topology, obj=f"podgroup {key}")
        lines += _consolidation_lines(operator, state.key, members, whole_gang=True, level=level)
    lines += _queue_lines(operator, members[0])
    return "\n".join(lines)


def _topology_text(constraint: TopologyConstraint) -> str:
    levels = (("required", constraint.required), ("preferred", constraint.preferred))
    return ", ".join(f"{word} level {level}" for word, level in levels if level)


def explain_queue(operator: Operator, name: str) -> str:
    loop = operator.loop
    tree = loop.tenancy.tree
    if name not in tree:
        problem = operator.queue_problems.get(name)
        if problem:
            return f"queue {name}: not in use: {problem}"
        raise NotFound(f"queue {name}: no such Queue")
    spec = tree.spec(name)
    status = _queue_status(loop, name)
    leaves = sorted(tree.leaves(), key=loop.tenancy.rank)
    kind = "leaf" if tree.is_leaf(name) else "parent"
    lines = [f"queue {name}: {kind}, parent {spec.parent or '-'}, weight {spec.weight:g}, priority {spec.priority}"]
    lines.append(f"  guarantee: {_amounts(spec.guaranteed)}; limit: {_amounts(spec.limit) if spec.limit else 'none'}")
    if spec.borrowing_limit or not spec.borrowing_allowed:
        allowed = "" if spec.borrowing_allowed else " (borrowing not allowed)"
        lines.append(f"  borrowing limit: {_amounts(spec.borrowing_limit)}{allowed}")

    def shown(field: str) -> str:
        value = status.get(field)
        return ", ".join(f"{r} {v}" for r, v in value.items()) if isinstance(value, Mapping) and value else "nothing"

    lines.append(f"  holds: {shown('allocated')}; borrowed: {shown('borrowed')}")
    lines.append(
        f"  waiting: {status.get('pendingPods', 0)} pods ({status.get('pendingGangs', 0)} gangs);"
        f" shares: dominant {status.get('dominantShare', '-')}, fair {status.get('fairShare', '-')}"
    )
    if name in leaves:
        lines.append(
            f"  order: {leaves.index(name) + 1} of {len(leaves)} leaf queues, by share beyond guarantee over weight"
            f" {status.get('rankShare', '-')} (lower goes first)"
        )
    return "\n".join(lines)


# --- the command half ----------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", metavar="POD|podgroup/NAME|queue/NAME", help="a pod name, podgroup/NAME for a gang, queue/NAME"
    )
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument(
        "--url",
        help="the scheduler's health endpoint, e.g. http://127.0.0.1:8081 (default: ask the scheduler's pods"
        " through the API server)",
    )
    parser.add_argument("--kubeconfig", help="a kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
    parser.add_argument("--context", help="a context of the kubeconfig")
    parser.add_argument(
        "--scheduler-namespace",
        default="gpusched-system",
        help="where the scheduler's pods and its Lease are (gpusched run's --namespace; default: %(default)s)",
    )
    parser.add_argument(
        "--lease-name",
        default="gpusched",
        help="the scheduler's Lease (gpusched run's --lease-name; default: %(default)s)",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=HEALTH_PORT,
        help="the scheduler pods' health port, asked through the pod proxy (gpusched run's --health-port;"
        " default: %(default)s)",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for an answer (default: 5)")
    parser.add_argument(
        "--token-file",
        help="a file holding the bearer token to ask with (default: the kubeconfig user's token; a user that"
        " authenticates with a client certificate has none: e.g. kubectl create token NAME > FILE)",
    )


def main(args: argparse.Namespace) -> int:
    # The command's output is its answer: the library's info lines (the API client's "api client ready") are for
    # `gpusched run`'s log, not for a user's terminal; warnings and errors still show, on stderr.
    logs.configure("auto", level=logging.WARNING)
    started = time.monotonic()
    code, text, source = asyncio.run(_ask(args))
    elapsed = time.monotonic() - started
    if code != 200:
        hint = f" ({NO_TOKEN_HINT})" if code == 401 else ""
        print(f"gpusched explain: {text}{hint}", file=sys.stderr)
        return 1
    print(text)
    print(f"(answered by {source} in {elapsed * 1000:.0f} ms)", file=sys.stderr)
    return 0


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl gpusched explain ...`` (kubectl runs ``kubectl-gpusched`` from the PATH)."""
    parser = argparse.ArgumentParser(prog="kubectl gpusched", description="gpusched's view of pods, gangs, queues")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_arguments(sub.add_parser("explain", help="why a pod (or podgroup/NAME) is pending, or how queue/NAME stands"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return main(args)
    except InvalidObject as exc:
        print(f"kubectl gpusched: {exc}", file=sys.stderr)
        return 2


def query(target: str, namespace: str) -> str:
    """The query string of ``/explain``."""
    return urllib.parse.urlencode({"target": target, "namespace": namespace})


#: Said after a 401.
NO_TOKEN_HINT = (
    "gpusched explain asks with the bearer token of its kubeconfig's user, or of --token-file; a user that"
    " authenticates with a client certificate has none"
)


def _settings(args: argparse.Namespace) -> k8s_client.ClientSettings:
    return k8s_client.ClientSettings(
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        context=args.context,
        qps=0,
        timeout=args.timeout,
    )


async def _ask(args: argparse.Namespace) -> tuple[int, str, str]:
    """(HTTP status, the answer or why there is none, who answered)."""
    if args.url:
        token = _token_file(args)
        if token is None:
            try:
                token = await bearer_token(await k8s_client.configuration(_settings(args)))
            except InvalidObject:
                token = ""  # no kubeconfig: asked without a token, the scheduler says 401 and we say why
        return await _ask_url(args.url, args, token=token)
    client = await k8s_client.connect(_settings(args))
    try:
        return await _ask_pods(client, args)
    finally:
        await client.close()


def _token_file(args: argparse.Namespace) -> str | None:
    """The token of ``--token-file`` (None when not given)."""
    if not args.token_file:
        return None
    try:
        with open(args.token_file, encoding="utf-8") as file:
            return file.read().strip()
    except OSError as exc:
        raise InvalidObject(f"cannot read: {exc.strerror or exc}", obj=f"token file {args.token_file}") from None


async def bearer_token(configuration: Any) -> str:
    """The bearer token a kubeconfig's user (or the in-cluster ServiceAccount) sends the API server: a ``token``,
    or what an exec plugin or auth provider gave the client library; "" for a client certificate or basic auth."""
    value = await configuration.get_api_key_with_prefix("BearerToken")
    scheme, _, token = str(value or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def _ask_url(base: str, args: argparse.Namespace, *, token: str) -> tuple[int, str, str]:
    url = f"{base.rstrip('/')}/explain?{query(args.target, args.namespace)}"
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url, headers=headers) as response:
            return response.status, _text(await response.read()), base
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return 0, f"cannot reach {base}: {type(exc).__name__}: {exc}", base


async def _lease(client: k8s_client.Client, args: argparse.Namespace) -> tuple[str, str]:
    """(holder, the address it published) of the scheduler's Lease; empty where there is none (no Lease, none
    readable, released, or a leader that published nothing)."""
    got = await client.call(
        CoordinationV1Api(client.api).read_namespaced_lease,
        name=args.lease_name,
        namespace=args.scheduler_namespace,
    )
    if not got.ok:
        return "", ""
    holder = str((got.body.get("spec") or {}).get("holderIdentity") or "")
    annotations = (got.body.get("metadata") or {}).get("annotations") or {}
    return holder, str(annotations.get(EXPLAIN_URL_ANNOTATION) or "") if holder else ""


async def _ask_pods(client: k8s_client.Client, args: argparse.Namespace) -> tuple[int, str, str]:
    """Ask the running scheduler pods through the API server's pod proxy (the Lease's holder first) until the
    leader answers; else the address the leader published on its Lease (a scheduler run outside the cluster)."""
    ns = args.scheduler_namespace
    token = _token_file(args)
    if token is None:
        token = await bearer_token(client.api.configuration)
    holder, published = await _lease(client, args)
    listing = await client.call(client.core.list_namespaced_pod, ns, label_selector=POD_SELECTOR)
    if not listing.ok and not published:
        return listing.status, f"cannot list the scheduler's pods in {ns}: {listing.message}", ns
    pods = [
        str((item.get("metadata") or {}).get("name"))
        for item in (listing.body.get("items", []) if listing.ok else [])
        if (item.get("status") or {}).get("phase") == "Running"
    ]
    pods.sort(key=lambda name: name != holder)  # the holder first; the others keep their order
    last = (0, "no answer", ns)
    for name in pods:
        reply = await client.call(
            client.core.connect_get_namespaced_pod_proxy_with_path,
            f"{name}:{args.health_port}",
            ns,
            "explain",
            path2=f"{args.namespace}/{args.target}",
            _headers={TOKEN_HEADER: f"Bearer {token}"} if token else {},
        )
        text = str(reply.body.get("answer") or reply.message)
        if reply.status != 503:
            return reply.status, text, f"pod {ns}/{name}"
        last = (reply.status, text, f"pod {ns}/{name}")
    if published:
        code, text, source = await _ask_url(published, args, token=token)
        return code, text, f"{source} (the leader {holder}, from Lease {ns}/{args.lease_name})"
    if not pods:
        return (
            0,
            f"no running scheduler pod in {ns} (label {POD_SELECTOR}), and no leader published its address on Lease "
            f"{ns}/{args.lease_name}; use --url to name one",
            ns,
        )
    return last


def _text(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
    if isinstance(body, Mapping):
        return str(body.get("answer") or body.get("message") or body)
    return str(body)


def token_of(headers: Mapping[str, str]) -> str:
    """The caller's bearer token: ``Authorization: Bearer``, else :data:`TOKEN_HEADER` (what came through the API
    server's pod proxy, which drops ``Authorization`` once it has authenticated the caller)."""
    for name in ("Authorization", TOKEN_HEADER):
        scheme, _, token = headers.get(name, "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return ""


async def reply(
    operator: Operator, params: Mapping[str, str], *, token: str, reviewer: access.Reviewer
) -> tuple[int, dict[str, Any]]:
    """The HTTP answer of ``/explain`` for its query parameters: ``target`` and ``namespace``, or ``path`` as
    ``NAMESPACE/TARGET`` (what the pod proxy forwards), asked with ``token``.

    Nothing is told without a right: the token's user (TokenReview) must be allowed to ``get`` the object explained
    (SubjectAccessReview: :meth:`Target.right`), else 401 (no token, or one the API server does not know) or 403,
    with ``missing`` naming what was missing; 503 when the API server could not be asked."""
    target = params.get("target", "")
    namespace = params.get("namespace", "default")
    if not target and params.get("path"):
        namespace, _, target = params["path"].partition("/")
    if not target:
        return 400, {"message": "say what to explain: ?target=POD|podgroup/NAME|queue/NAME&namespace=NS"}
    try:
        asked = Target.parse(target, namespace)
    except NotFound as exc:
        return 404, {"message": str(exc)}
    right = asked.right()
    if not token:
        return 401, {
            "message": f"explain needs a Kubernetes bearer token (Authorization: Bearer ..., or {TOKEN_HEADER}:"
            " Bearer ... through the API server's pod proxy)",
            "missing": "token",
        }
    checked = await reviewer.check(token, right)
    if isinstance(checked, access.Refusal):
        body: dict[str, Any] = {"message": checked.message}
        if checked.status == 401:
            body["missing"] = "token"
        elif checked.status == 403:
            body["missing"] = right
        return checked.status, body
    if not operator.leading:
        return 503, {"message": "this replica is a standby; ask the leader (its /leader answers 200)"}
    if not operator.ready:
        return 503, {"message": "the scheduler is warming up (its first listing is not in yet)"}
    try:
        return 200, {"answer": answer(operator, target, namespace), "replica": operator.identity}
    except NotFound as exc:
        return 404, {"message": str(exc)}
