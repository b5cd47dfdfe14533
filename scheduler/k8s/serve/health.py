"""Health and metrics endpoints on aiohttp (already there for kubernetes_asyncio and kopf).

Health port: ``/healthz`` answers 200 while the event loop runs (a blocked loop cannot answer: that is the
point); ``/readyz`` 200 once the first full listing is in the cache, 503 before (standbys are ready too), and 503
``not leading and cannot lead: <reason>`` on a replica that does not lead and whose Lease the API server refuses
(its namespace does not exist, RBAC forbids it: ``scheduler.k8s.leader``), so that such a replica shows in
``kubectl get pods`` instead of idling silently; ``/leader`` 200 ``leader`` on the replica that schedules, 503
``standby`` elsewhere (or the refusal); ``/explain?target=...&
namespace=...`` answers ``gpusched explain`` from the leader's live state (JSON ``{"answer": text}``; 404 for an
object the scheduler does not know, 503 on a standby; see ``scheduler.k8s.serve.explain``) to a caller whose bearer
token
the API server knows and who may ``get`` the object explained (401, 403 otherwise: ``scheduler.k8s.serve.access``).
Metrics port: ``/metrics`` in the Prometheus text format, with the state gauges recomputed for each scrape on the
leader (a standby exports none of them: ``scheduler.k8s.serve.metrics``).

Both bind ``--bind-address`` (default all interfaces: the kubelet's probes, the API server's pod proxy and
Prometheus come from outside the pod); ``127.0.0.1`` keeps them to the host. The probes answer anyone (they tell
only whether the process runs, is warm and leads); ``/explain`` asks who. ``/metrics`` answers anyone too, for
Prometheus, which scrapes without a token by default: its series carry figures per queue (Queues are cluster-wide
objects) and for the cluster as a whole, never a pod's, a namespace's or a node's name
(``scheduler.k8s.serve.metrics``: label values are bounded). manifests/networkpolicy.yaml lets in only these two ports.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import access, explain

#: TokenReviews and SubjectAccessReviews ``/explain`` may ask per second, and at once: a person running
#: ``gpusched explain`` asks two per new token and 30 s, a script polling with one token asks nothing new.
EXPLAIN_REVIEWS_QPS = 5.0
EXPLAIN_REVIEWS_BURST = 20


@dataclass
class Servers:
    health: web.AppRunner
    metrics: web.AppRunner
    health_port: int
    metrics_port: int

    async def close(self) -> None:
        await self.health.cleanup()
        await self.metrics.cleanup()


def health_app(operator: Operator) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if not operator.ready:
            return web.Response(status=503, text="warming up: the first listing is not in the cache yet")
        refused = _cannot_lead(operator)
        if refused:
            return web.Response(status=503, text=refused)
        return web.Response(text="ready")

    async def leader(_: web.Request) -> web.Response:
        if operator.leading:
            return web.Response(text="leader")
        return web.Response(status=503, text=_cannot_lead(operator) or "standby")

    # A budget of its own, so that made-up tokens cannot spend the bindings' (scheduler.k8s.serve.access).
    reviewer = access.Reviewer(operator.client, qps=EXPLAIN_REVIEWS_QPS, burst=EXPLAIN_REVIEWS_BURST)

    async def explained(request: web.Request) -> web.Response:
        status, body = await explain.reply(
            operator, request.query, token=access.token_of(request.headers), reviewer=reviewer
        )
        headers = {"WWW-Authenticate": 'Bearer realm="gpusched explain"'} if status == 401 else None
        headers = {"Retry-After": "1"} if status == 429 else headers
        return web.json_response(body, status=status, headers=headers)

    app = web.Application()
    app.router.add_get("/explain", explained)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/leader", leader)
    return app


def _cannot_lead(operator: Operator) -> str:
    """ "not leading and cannot lead: <reason>" on a replica the API server refuses the Lease, else "" (a standby
    that could take the lease over is ready)."""
    refusal = "" if operator.leading else operator.lease_refusal()
    return f"not leading and cannot lead: {refusal}" if refusal else ""


def metrics_app(operator: Operator) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        operator.metrics.can_lead.set(0.0 if _cannot_lead(operator) else 1.0)
        if operator.leading:  # a standby exports no state gauge (scheduler.k8s.serve.metrics): nothing to recompute
            operator.metrics.refresh_state(
                operator.loop,
                operator.pending,
                node_problems=operator.cache.gpu_topology_problems,
                gated=operator.feed.gated.values(),
                now=operator.clock(),
            )
        response = web.Response(body=operator.metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def serve(operator: Operator, *, health_port: int, metrics_port: int, host: str = "0.0.0.0") -> Servers:
    """Start both servers; a port of 0 picks a free one (the chosen ports are in the result and the log)."""
    runners = []
    ports = []
    for app, port in ((health_app(operator), health_port), (metrics_app(operator), metrics_port)):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        ports.append(int(sockets[0].getsockname()[1]) if sockets else port)
        runners.append(runner)
    return Servers(runners[0], runners[1], ports[0], ports[1])
