"""A fake API server for the writers' tests: the few endpoints they call, with canned answers, on aiohttp.

It records every request (method, path, JSON body, content type), answers bindings by pod name from
``bind_answers`` (201 with a Status by default, as the real one does), serves pods from ``pods`` for the
binder's read-back, keeps Events it was sent (so a PATCH of a count is visible), counts bindings in flight,
deletes pods (preemption), takes patches of claims (volume binding), and keeps coordination.k8s.io Leases
with the API server's optimistic concurrency (an update must carry the current ``resourceVersion``, else 409),
for leader election. Its discovery (``GET /apis/<group>/<version>``) serves the group versions of :data:`DISCOVERY`
unless a test names one in ``unserved``: then that group version answers 404 everywhere, as on a cluster that does
not serve it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as k8s_client

from scheduler.k8s import client as k8s


def client_for(
    url: str, *, limiter: k8s.RateLimiter | None = None, timeout: float = 10.0, agent: str = "", in_flight: int = 100
) -> k8s.Client:
    """A :class:`scheduler.k8s.client.Client` for a server that needs no credentials (a fake one), sending
    ``agent`` as its User-Agent when given; gpusched's own clients come from a kubeconfig or the in-cluster files
    (:func:`scheduler.k8s.client.connect`), which makes it the same way otherwise."""
    api = k8s_client.ApiClient(configuration=k8s_client.Configuration(host=url))
    if agent:
        api.user_agent = agent
    k8s._skip_env_lookups(api)  # as connect() does: the hot writes then go out on the client's own connections
    return k8s.Client(api, limiter=limiter, timeout=timeout, in_flight=in_flight)


@dataclass
class Seen:
    method: str
    path: str
    body: Any
    content_type: str
    #: The client's User-Agent (:func:`client_for` names one per replica).
    agent: str = ""


@dataclass
class Canned:
    status: int
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: Never answer (until the test ends): the client must time out.
    hang: bool = False


def status(code: int, reason: str = "", message: str = "") -> dict[str, Any]:
    """A metav1.Status body, as the API server sends for errors and for a successful binding."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "code": code}
    body["status"] = "Success" if code < 300 else "Failure"
    if reason:
        body["reason"] = reason
    if message:
        body["message"] = message
    return body


BOUND = Canned(201, status(201))

#: The group versions the fake's discovery serves, with their resources (the kinds gpusched reads of each).
DISCOVERY: dict[str, tuple[str, ...]] = {
    "resource.k8s.io/v1": ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"),
    "policy/v1": ("poddisruptionbudgets",),
    "storage.k8s.io/v1": ("storageclasses", "csinodes"),
    "coordination.k8s.io/v1": ("leases",),
}


class FakeApiServer:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        #: Pod name -> the answer to its binding (default: 201 with a Status).
        self.bind_answers: dict[str, Canned] = {}
        #: Pod name -> answers to reads of that pod, taken in order before ``pods`` is served (an API server down).
        self.get_pod_answers: dict[str, list[Canned]] = {}
        #: Seconds each binding takes.
        self.bind_delay = 0.0
        #: "ns/name" -> the pod a GET returns (404 when absent).
        self.pods: dict[str, dict[str, Any]] = {}
        #: (namespace, name) -> the Event as last written.
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        #: Answers for PATCHes of pods/status and custom status, in order (then 200).
        self.status_answers: list[Canned] = []
        self.event_patch_answers: list[Canned] = []
        #: Listed by GET /api/v1/nodes; custom objects by plural (served by the list and get endpoints).
        self.nodes: list[dict[str, Any]] = []
        self.custom: dict[str, list[dict[str, Any]]] = {}
        #: What a pod watch streams, in order: (type, object); ("ERROR", 410) ends it with 410 Gone, ("CUT", None) cuts
        #: the connection, ("BYTES", b"...") writes those bytes as they are (events cut or joined as a test says).
        self.pod_watch: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        #: The resourceVersion each pod watch asked to start from, in order.
        self.watch_versions: list[str] = []
        self.list_rv = 100
        #: (namespace, name) -> the Lease as last written; ``lease_rv`` numbers its versions.
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.lease_rv = 0
        #: While set, lease requests hang (an API server the leader cannot reach).
        self.leases_unreachable = False
        #: Seconds each Lease request takes before it is answered (an API server, or a machine, under load).
        self.lease_delay = 0.0
        #: Namespaces that do not exist: a Lease cannot be created there (404, as the API server answers).
        self.missing_namespaces: set[str] = set()
        #: (namespace, name) -> ResourceClaim, with the API server's optimistic concurrency on PUT (resource.k8s.io).
        self.resource_claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.claim_rv = 0
        #: Answers for PUTs of a ResourceClaim's status, in order, before the stored claim is updated (then 200).
        self.claim_status_answers: list[Canned] = []
        #: Pod name -> the answer to its deletion (default: 200 and the pod is gone; 404 when it is absent).
        self.delete_answers: dict[str, Canned] = {}
        #: Pod name -> the answer to its eviction (default: 201, and the pod is gone, as an accepted eviction).
        self.eviction_answers: dict[str, Canned] = {}
        #: TokenReview: token -> the user it is (any other token is unknown).
        self.tokens: dict[str, str] = {}
        #: SubjectAccessReview: (user, verb, resource, namespace) the user may do, whatever the object's name;
        #: ``resource`` is ``pods`` or ``PLURAL.GROUP`` (``queues.scheduling.gpusched.io``), namespace "" for a
        #: cluster-wide right (it covers every namespace), ``nonResourceURLs`` rights as (user, verb, path, "").
        self.rights: set[tuple[str, str, str, str]] = set()
        #: Pod name -> the base URL its pod proxy forwards to (``pods/NAME:PORT/proxy/...``).
        self.pod_proxies: dict[str, str] = {}
        #: Group versions (``resource.k8s.io/v1``) answered 404, discovery and lists alike.
        self.unserved: set[str] = set()
        #: The paths of the discovery and custom list or watch requests, in order.
        self.reads: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", self._binding)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._get_pod)
        app.router.add_delete("/api/v1/namespaces/{ns}/pods/{name}", self._delete_pod)
        app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/eviction", self._evict_pod)
        app.router.add_get("/api/v1/nodes", self._list_nodes)
        app.router.add_get("/api/v1/pods", self._list_pods)
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._list_namespaced_pods)
        app.router.add_get("/apis/{group}/{version}", self._discovery)
        app.router.add_get("/apis/{group}/{version}/{plural}", self._list_custom)
        app.router.add_get("/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}", self._get_custom)
        leases = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        app.router.add_get(leases + "/{name}", self._get_lease)
        app.router.add_post(leases, self._create_lease)
        app.router.add_put(leases + "/{name}", self._replace_lease)
        app.router.add_patch("/api/v1/namespaces/{ns}/pods/{name}/status", self._patch_status)
        app.router.add_post("/api/v1/namespaces/{ns}/events", self._create_event)
        app.router.add_patch("/api/v1/namespaces/{ns}/events/{name}", self._patch_event)
        app.router.add_patch("/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}/status", self._patch_status)
        app.router.add_patch("/apis/{group}/{version}/{plural}/{name}/status", self._patch_status)
        app.router.add_patch("/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}", self._patch_claim)
        claims = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"
        app.router.add_get(claims, self._get_resource_claim)
        app.router.add_put(claims, self._put_resource_claim)
        app.router.add_put(claims + "/status", self._put_resource_claim)
        app.router.add_patch(claims, self._patch_resource_claim)
        app.router.add_patch(claims + "/status", self._patch_resource_claim)
        app.router.add_post("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", self._create_resource_claim)
        app.router.add_delete(claims, self._delete_resource_claim)
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", self._access_review)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{target}/proxy/{path:.*}", self._pod_proxy)
        self._server = TestServer(app)

    @property
    def url(self) -> str:
        return f"http://{self._server.host}:{self._server.port}"

    async def start(self) -> None:
        await self._server.start_server()

    async def close(self) -> None:
        self._release.set()
        await self._server.close()

    def requests(self, method: str, suffix: str = "") -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path.endswith(suffix)]

    # --- handlers ----------------------------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.seen.append(
            Seen(request.method, request.path, body, request.content_type, request.headers.get("User-Agent", ""))
        )
        return body

    async def _token_review(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        user = self.tokens.get(body["spec"]["token"])
        status = {"authenticated": True, "user": {"username": user, "groups": ["system:authenticated"]}}
        return web.json_response({**body, "status": status if user else {"error": "unknown token"}}, status=201)

    async def _access_review(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        spec = body["spec"]
        if "nonResourceAttributes" in spec:
            asked = spec["nonResourceAttributes"]
            allowed = (spec["user"], asked["verb"], asked["path"], "") in self.rights
        else:
            asked = spec["resourceAttributes"]
            resource = asked["resource"] + (f".{asked['group']}" if asked.get("group") else "")
            allowed = any(
                (spec["user"], asked["verb"], resource, namespace) in self.rights
                for namespace in {"", asked.get("namespace", "")}
            )
        return web.json_response({**body, "status": {"allowed": allowed}}, status=201)

    async def _pod_proxy(self, request: web.Request) -> web.Response:
        """Forward to :attr:`pod_proxies` as the API server does: query and headers kept, but ``Authorization``
        removed (the API server drops it once it has authenticated the caller)."""
        await self._record(request)
        name = request.match_info["target"].partition(":")[0]
        base = self.pod_proxies.get(name)
        if base is None:
            return web.json_response(status(503, "ServiceUnavailable", f"pod {name} has no address"), status=503)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "host")}
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{base}/{request.match_info['path']}", params=request.query, headers=headers) as answer,
        ):
            return web.Response(status=answer.status, body=await answer.read(), content_type=answer.content_type)

    async def _answer(self, canned: Canned) -> web.Response:
        if canned.hang:
            await self._release.wait()
        return web.json_response(canned.body, status=canned.status, headers=canned.headers)

    async def _binding(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._record(request)
            if self.bind_delay:
                await asyncio.sleep(self.bind_delay)
            return await self._answer(self.bind_answers.get(request.match_info["name"], BOUND))
        finally:
            self.in_flight -= 1

    async def _get_pod(self, request: web.Request) -> web.Response:
        await self._record(request)
        canned = self.get_pod_answers.get(request.match_info["name"])
        if canned:
            return await self._answer(canned.pop(0))
        pod = self.pods.get(f"{request.match_info['ns']}/{request.match_info['name']}")
        if pod is None:
            return web.json_response(status(404, "NotFound", "pods not found"), status=404)
        return web.json_response(pod)

    async def _list_nodes(self, request: web.Request) -> web.Response:
        return web.json_response({"items": self.nodes, "metadata": {}})

    async def _list_pods(self, request: web.Request) -> web.StreamResponse:
        """Pages by ``limit``/``continue`` (the token is an offset); ``watch=true`` streams :attr:`pod_watch`."""
        await self._record(request)
        if request.query.get("watch") in ("true", "1", "True"):
            return await self._watch_pods(request)
        items = list(self.pods.values())
        start = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or len(items) or 1)
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": str(self.list_rv)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return web.json_response({"items": page, "metadata": meta})

    async def _list_namespaced_pods(self, request: web.Request) -> web.Response:
        """The pods of one namespace (no paging, no selector: what ``gpusched explain`` lists)."""
        await self._record(request)
        ns = request.match_info["ns"]
        items = [pod for pod in self.pods.values() if (pod.get("metadata") or {}).get("namespace") == ns]
        return web.json_response({"items": items, "metadata": {"resourceVersion": str(self.list_rv)}})

    async def _watch_pods(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        self.watch_versions.append(request.query.get("resourceVersion", ""))
        while True:
            kind, obj = await self.pod_watch.get()
            if kind == "CUT":  # the connection is lost mid-stream (an API server killed)
                assert request.transport is not None
                request.transport.close()
                return response
            if kind == "BYTES":
                await response.write(obj)
                continue
            if kind == "ERROR":
                obj = {"kind": "Status", "code": obj, "message": "too old resource version"}
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            if kind == "ERROR":
                return response

    def _unserved(self, request: web.Request) -> web.Response | None:
        """404 for a group version of :attr:`unserved`, as the API server answers (None when it is served)."""
        group_version = f"{request.match_info['group']}/{request.match_info['version']}"
        if group_version not in self.unserved:
            return None
        return web.json_response(
            status(404, "NotFound", "the server could not find the requested resource"), status=404
        )

    async def _discovery(self, request: web.Request) -> web.Response:
        self.reads.append(request.path)
        group_version = f"{request.match_info['group']}/{request.match_info['version']}"
        missing = self._unserved(request)
        if missing is not None or group_version not in DISCOVERY:
            return missing or web.json_response(status(404, "NotFound", "not found"), status=404)
        resources = [
            {"name": name, "kind": name, "verbs": ["get", "list", "watch"]} for name in DISCOVERY[group_version]
        ]
        return web.json_response({"kind": "APIResourceList", "groupVersion": group_version, "resources": resources})

    async def _list_custom(self, request: web.Request) -> web.Response:
        self.reads.append(request.path)
        missing = self._unserved(request)
        if missing is not None:
            return missing
        return web.json_response({"items": self.custom.get(request.match_info["plural"], []), "metadata": {}})

    async def _get_custom(self, request: web.Request) -> web.Response:
        for item in self.custom.get(request.match_info["plural"], []):
            meta = item["metadata"]
            if (meta.get("namespace"), meta["name"]) == (request.match_info["ns"], request.match_info["name"]):
                return web.json_response(item)
        return web.json_response(status(404, "NotFound", "not found"), status=404)

    async def _delete_pod(self, request: web.Request) -> web.Response:
        await self._record(request)
        canned = self.delete_answers.get(request.match_info["name"])
        if canned is not None:
            return web.json_response(canned.body, status=canned.status)
        pod = self.pods.pop(f"{request.match_info['ns']}/{request.match_info['name']}", None)
        if pod is None:
            return web.json_response(status(404, "NotFound", "pods not found"), status=404)
        return web.json_response(pod)

    async def _evict_pod(self, request: web.Request) -> web.Response:
        await self._record(request)
        canned = self.eviction_answers.get(request.match_info["name"])
        if canned is not None:
            return await self._answer(canned)
        self.pods.pop(f"{request.match_info['ns']}/{request.match_info['name']}", None)
        return web.json_response(status(201, message="evicted"), status=201)

    async def _lease_gate(self) -> None:
        while self.leases_unreachable:
            await asyncio.sleep(0.01)
        if self.lease_delay:
            await asyncio.sleep(self.lease_delay)

    async def _get_lease(self, request: web.Request) -> web.Response:
        await self._record(request)
        await self._lease_gate()
        lease = self.leases.get((request.match_info["ns"], request.match_info["name"]))
        if lease is None:
            return web.json_response(status(404, "NotFound", "leases not found"), status=404)
        return web.json_response(lease)

    async def _create_lease(self, request: web.Request) -> web.Response:
        await self._lease_gate()
        body = await self._record(request)
        key = (request.match_info["ns"], body["metadata"]["name"])
        if key[0] in self.missing_namespaces:
            missing = status(404, "NotFound", f'namespaces "{key[0]}" not found')
            missing["details"] = {"name": key[0], "kind": "namespaces"}
            return web.json_response(missing, status=404)
        if key in self.leases:
            return web.json_response(status(409, "AlreadyExists", "leases already exists"), status=409)
        return web.json_response(self._store_lease(key, body), status=201)

    async def _replace_lease(self, request: web.Request) -> web.Response:
        await self._lease_gate()
        body = await self._record(request)
        key = (request.match_info["ns"], request.match_info["name"])
        current = self.leases.get(key)
        if current is None:
            return web.json_response(status(404, "NotFound", "leases not found"), status=404)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return web.json_response(status(409, "Conflict", "the object has been modified"), status=409)
        return web.json_response(self._store_lease(key, body))

    def _store_lease(self, key: tuple[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self.lease_rv += 1
        body["metadata"]["resourceVersion"] = str(self.lease_rv)
        self.leases[key] = body
        return body

    async def _patch_status(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if self.status_answers:
            return await self._answer(self.status_answers.pop(0))
        return web.json_response(body)

    async def _patch_claim(self, request: web.Request) -> web.Response:
        """A claim's annotations (the volume PreBind asking for provisioning): recorded, answered 200."""
        await self._record(request)
        return web.json_response({"kind": "PersistentVolumeClaim"}, status=200)

    def store_resource_claim(self, body: dict[str, Any]) -> dict[str, Any]:
        self.claim_rv += 1
        body["metadata"]["resourceVersion"] = str(self.claim_rv)
        self.resource_claims[(body["metadata"].get("namespace", "default"), body["metadata"]["name"])] = body
        return body

    async def _get_resource_claim(self, request: web.Request) -> web.Response:
        await self._record(request)
        claim = self.resource_claims.get((request.match_info["ns"], request.match_info["name"]))
        if claim is None:
            return web.json_response(status(404, "NotFound", "resourceclaims not found"), status=404)
        return web.json_response(claim)

    async def _put_resource_claim(self, request: web.Request) -> web.Response:
        """A claim (finalizers) or its status: stored when its resourceVersion is the current one, else 409."""
        body = await self._record(request)
        if request.path.endswith("/status") and self.claim_status_answers:
            return await self._answer(self.claim_status_answers.pop(0))
        key = (request.match_info["ns"], request.match_info["name"])
        current = self.resource_claims.get(key)
        if current is None:
            return web.json_response(status(404, "NotFound", "resourceclaims not found"), status=404)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return web.json_response(status(409, "Conflict", "the object has been modified"), status=409)
        if request.path.endswith("/status"):
            body = {**current, "status": body.get("status") or {}}
        else:
            body = {**body, "status": current.get("status") or {}}
        return web.json_response(self.store_resource_claim(body))

    async def _patch_resource_claim(self, request: web.Request) -> web.Response:
        """A merge patch of a claim or its status; a ``metadata.resourceVersion`` in it is a precondition (409)."""
        body = await self._record(request)
        if request.path.endswith("/status") and self.claim_status_answers:
            return await self._answer(self.claim_status_answers.pop(0))
        key = (request.match_info["ns"], request.match_info["name"])
        current = self.resource_claims.get(key)
        if current is None:
            return web.json_response(status(404, "NotFound", "resourceclaims not found"), status=404)
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != current["metadata"]["resourceVersion"]:
            return web.json_response(status(409, "Conflict", "the object has been modified"), status=409)
        if request.path.endswith("/status"):
            patched = {**current, "status": _merge(current.get("status") or {}, body.get("status") or {})}
        else:
            patched = _merge(current, {k: v for k, v in body.items() if k != "status"})
        return web.json_response(self.store_resource_claim(patched))

    async def _create_resource_claim(self, request: web.Request) -> web.Response:
        """A claim created with ``generateName`` (the extended resource claim): named ``<prefix>N``."""
        body = await self._record(request)
        meta = body["metadata"]
        meta.setdefault("name", f"{meta.get('generateName', 'claim-')}{self.claim_rv + 1}")
        meta["uid"] = f"uid-claim-{meta['name']}"
        meta["namespace"] = request.match_info["ns"]
        return web.json_response(self.store_resource_claim(body), status=201)

    async def _delete_resource_claim(self, request: web.Request) -> web.Response:
        await self._record(request)
        claim = self.resource_claims.pop((request.match_info["ns"], request.match_info["name"]), None)
        if claim is None:
            return web.json_response(status(404, "NotFound", "resourceclaims not found"), status=404)
        return web.json_response(claim)

    async def _create_event(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        key = (request.match_info["ns"], body["metadata"]["name"])
        if key in self.events:
            return web.json_response(status(409, "AlreadyExists", "events already exists"), status=409)
        self.events[key] = body
        return web.json_response(body, status=201)

    async def _patch_event(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if self.event_patch_answers:
            return await self._answer(self.event_patch_answers.pop(0))
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.events:
            return web.json_response(status(404, "NotFound", "events not found"), status=404)
        self.events[key].update(body)
        return web.json_response(self.events[key])


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch: maps merge, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout: float = 5.0) -> None:
    """Wait until ``check()`` holds (the writers work in the background)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
