"""``gpusched explain POD|podgroup/NAME|queue/NAME``: why a pod or a gang waits, or how a queue stands, told from
the running leader's live state; this module carries it, ``scheduler.core.explanation`` tells it.

Two halves:

- :func:`reply` answers ``/explain`` inside the scheduler (on the health port, see ``scheduler.k8s.serve.health``): it
  parses the query, checks the caller's right, and hands the operator's loop, as it is now, to the core's
  explanation (:func:`answer`), on the event loop (so no cycle runs meanwhile). Only the leader answers (a standby's
  queue does not move): 503 elsewhere.
- :func:`main` is the command (``gpusched explain``, or ``kubectl gpusched explain`` through :func:`kubectl_main`):
  it asks ``--url`` when given, else the scheduler's pods through the API server's pod proxy (no port-forward),
  the Lease's holder first, else the address the leader published on its Lease (a ``gpusched run`` outside the
  cluster: ``scheduler.k8s.leader``), and prints the answer on stdout; anything else (errors, timing) goes to
  stderr.

Nothing is told without a right, as on the dashboard (``scheduler.k8s.serve.access``): ``/explain`` needs a bearer
token, which a TokenReview turns into a user, and a SubjectAccessReview that this user may ``get`` the object
explained (``access.to_get``: the pod, the PodGroup in its namespace, the Queue); else 401 or 403 with a JSON body
naming what is missing. The command sends its kubeconfig user's token (a ``token``, or what an exec plugin or
auth provider gave the client library), or ``--token-file``'s: as ``Authorization: Bearer`` to an address, and as
``access.TOKEN_HEADER`` through the pod proxy, since the API server drops ``Authorization`` once it has
authenticated the caller.

Units are Kubernetes quantities (``2500m`` CPU, ``256Gi`` memory, ``0.5`` GPUs) and shares as the Queue's status
writes them.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from kubernetes_asyncio.client import CoordinationV1Api

from scheduler.api.basics.errors import InvalidObject
from scheduler.k8s import client as k8s_client
from scheduler.k8s import logs
from scheduler.k8s import status as k8s_status
from scheduler.k8s.leader import EXPLAIN_URL_ANNOTATION
from scheduler.k8s.serve import access

if TYPE_CHECKING:
    from scheduler.k8s.operator import Operator

#: The label of the scheduler's pods and the port of their health server (manifests/deployment.yaml).
POD_SELECTOR = "app.kubernetes.io/name=gpusched"
HEALTH_PORT = 8081
_GROUP_WORDS = ("podgroup", "podgroups", "pg")
_QUEUE_WORDS = ("queue", "queues", "gq", "q")
_POD_WORDS = ("pod", "pods", "po")


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


def answer(operator: Operator, target: str, namespace: str = "default") -> str:
    """The explanation of ``target`` (``POD``, ``pod/NAME``, ``podgroup/NAME``, ``queue/NAME``); NotFound if the
    scheduler does not know it."""
    # Imported here, where the scheduler answers: the command only asks, and the core (numba and its kernels with
    # it) would more than double its start.
    from scheduler.core import explanation

    asked = Target.parse(target, namespace)
    live = explanation.Live(
        loop=operator.loop,
        pending=operator.pending,
        units=explanation.Units(amounts=_amounts, share=k8s_status.share),
        unreadable=operator.unreadable_pods,
        said=operator.conditions.said,
        queue_problems=operator.queue_problems,
        gated=operator.feed.gated,
    )
    try:
        if asked.kind == "podgroup":
            return explanation.explain_group(live, f"{namespace}/{asked.name}")
        if asked.kind == "queue":
            return explanation.explain_queue(live, asked.name)
        return explanation.explain_pod(live, f"{namespace}/{asked.name}")
    except explanation.NotFound as exc:
        raise NotFound(str(exc)) from None


def _amounts(vector: Mapping[str, float]) -> str:
    """A resource vector as Kubernetes quantities, as the Queue's status writes them."""
    text = ", ".join(f"{name} {amount}" for name, amount in k8s_status.quantities(vector).items())
    return text or "nothing"


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
            _headers={access.TOKEN_HEADER: f"Bearer {token}"} if token else {},
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


async def reply(
    operator: Operator, params: Mapping[str, str], *, token: str, reviewer: access.Reviewer
) -> tuple[int, dict[str, Any]]:
    """The HTTP answer of ``/explain`` for its query parameters: ``target`` and ``namespace``, or ``path`` as
    ``NAMESPACE/TARGET`` (what the pod proxy forwards), asked with ``token``.

    Nothing is told without a right: the token's user (TokenReview) must be allowed to ``get`` the object explained
    (SubjectAccessReview: ``access.to_get``), else 401 (no token, or one the API server does not know) or 403,
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
    refused = await access.refused(
        reviewer, token, access.to_get(asked.kind, namespace=asked.namespace, name=asked.name), asking="explain"
    )
    if refused is not None:
        return refused
    if not operator.leading:
        return 503, {"message": "this replica is a standby; ask the leader (its /leader answers 200)"}
    if not operator.ready:
        return 503, {"message": "the scheduler is warming up (its first listing is not in yet)"}
    try:
        return 200, {"answer": answer(operator, target, namespace), "replica": operator.identity}
    except NotFound as exc:
        return 404, {"message": str(exc)}
