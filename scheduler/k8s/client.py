"""The one door to the API server for gpusched's writers: an ApiClient, a shared QPS limiter, plain answers.

The binder, the Events recorder and the status writers all write through one :class:`Client`, so one token
bucket (client-go's ``--kube-api-qps`` / ``--kube-api-burst``) bounds what the scheduler as a whole sends.

Every call asks the generated client for the raw response (``_preload_content=False``) and returns an
:class:`Answer` (HTTP status and JSON body) instead of raising. Two reasons: the generated client cannot be
trusted to deserialise every success (``pods/binding`` answers a ``Status`` where it expects a ``Binding``,
kubernetes-client/python #825), and callers decide by status code anyway. A request that got no answer (timeout,
connection refused, reset) is status 0: the caller cannot know whether the server applied it.

The writes of every pod bound (its binding, its ``Scheduled`` Event, and a DRA claim's finalizer and allocation before
the binding) skip the generated client's own work and go straight out on the client's own connections (:data:`DIRECT`),
named by their generated methods all the same; answers and watch events are decoded by :func:`loads` (orjson). Both
for the CPU each pod costs (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import structlog
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from scheduler.api.basics.errors import InvalidObject
from scheduler.k8s import http1

log = structlog.get_logger(__name__)

#: The Status reasons of the API server we look at (metav1.StatusReason).
REASON_ALREADY_EXISTS = "AlreadyExists"
REASON_CONFLICT = "Conflict"
REASON_NOT_FOUND = "NotFound"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How to reach the API server and how hard to push it."""

    #: A kubeconfig file; None: in-cluster config when running in a pod, else ``$KUBECONFIG`` or ~/.kube/config.
    kubeconfig: str | None = None
    #: A context of the kubeconfig; None: its current context.
    context: str | None = None
    #: Requests per second, sustained, over all writers (0 or less: no limit).
    qps: float = 50.0
    #: Requests allowed at once above ``qps`` after a quiet spell.
    burst: int = 100
    #: Seconds one request may take, answer included; after that it counts as unanswered (status 0).
    timeout: float = 10.0
    #: Requests in flight at once through :meth:`Client.call` (the binds plus the other writers); the others wait
    #: their turn before their ``timeout`` starts. The connection pool has :data:`WATCH_CONNECTIONS` more.
    connections: int = 100


#: Connections of the pool kept for the informers' watches, each held for minutes (11 kinds are watched): without
#: them the watches took the requests' connections, and requests waiting for one timed out with no request sent.
WATCH_CONNECTIONS = 16


class RateLimiter:
    """A token bucket shared by coroutines: ``await acquire()`` before each request.

    Waiters are served in arrival order: each one reserves the next token, going into debt, and sleeps until
    the debt would have been refilled (as golang.org/x/time/rate's reservations do).
    """

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._stamp = clock()
        #: How many acquisitions had to wait, and for how long in all (seconds).
        self.waited = 0
        self.waited_seconds = 0.0

    def reserve(self) -> float:
        """Take a token now; return how many seconds to wait before using it."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def cancel(self) -> None:
        """Give back a token reserved but not used."""
        if self.qps > 0:
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay <= 0:
            return
        self.waited += 1
        self.waited_seconds += delay
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.cancel()
            raise


@dataclass(frozen=True, slots=True)
class Answer:
    """What the API server said (or that it said nothing: ``status == 0``)."""

    status: int
    body: Mapping[str, Any] = field(default_factory=dict)
    #: Why there is no answer (status 0), e.g. "TimeoutError".
    error: str = ""
    #: Seconds from a ``Retry-After`` header (429, 503), else 0.
    retry_after: float = 0.0

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def answered(self) -> bool:
        return self.status != 0

    @property
    def reason(self) -> str:
        """The Status ``reason`` (``AlreadyExists``, ``Conflict``, ``NotFound``...) when the body is a Status."""
        value = self.body.get("reason", "")
        return value if isinstance(value, str) else ""

    @property
    def message(self) -> str:
        """A human-readable account: the Status message, else the transport error, else the status line."""
        value = self.body.get("message")
        if isinstance(value, str) and value:
            return value
        if self.error:
            return self.error
        return f"HTTP {self.status}"


#: The writes sent straight out (:meth:`Client._send`), by the generated API class and method the caller gives:
#: (verb, path). Each is made for every pod bound (a binding, an Event) or every DRA claim allocated (its two
#: patches), so the generated client's work per request (checking every parameter, serialising headers, path and body
#: through its models, the standard library's JSON encoder) was 7% of the scheduler's CPU under
#: benchmarks/e2e_throughput.py (docs/performance.md, "CPU per pod"). Callers still name the generated method, so the
#: scan that keeps the RBAC table complete (tests/k8s/test_rbac.py) sees every call; what is sent is the same request:
#: verb, path, JSON body with its content type, the client's headers and credentials.
DIRECT: dict[tuple[str, str], tuple[str, str]] = {
    ("CoreV1Api", "create_namespaced_pod_binding"): ("POST", "/api/v1/namespaces/{namespace}/pods/{name}/binding"),
    ("CoreV1Api", "create_namespaced_event"): ("POST", "/api/v1/namespaces/{namespace}/events"),
    # A DRA claim's two writes before its pod's binding: the finalizer, then the allocation and reservedFor.
    ("ResourceV1Api", "patch_namespaced_resource_claim"): (
        "PATCH",
        "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}",
    ),
    ("ResourceV1Api", "patch_namespaced_resource_claim_status"): (
        "PATCH",
        "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status",
    ),
}

#: What a call may name and still go through :data:`DIRECT`; any other argument (``dry_run``...) goes through the
#: generated method, which knows what to do with it.
_DIRECT_ARGS = frozenset({"name", "namespace", "body", "_content_type"})


class Client:
    """An ApiClient plus the limiter and timeout every writer shares; see :meth:`call`."""

    def __init__(
        self, api: Any, *, limiter: RateLimiter | None = None, timeout: float = 10.0, in_flight: int = 100
    ) -> None:
        self.api = api
        self.limiter = limiter if limiter is not None else RateLimiter(0, 1)
        self.timeout = timeout
        #: Requests in flight (``ClientSettings.connections``): a request waits here, not on the pool, so that its
        #: timeout counts the API server's time only.
        self._slots = asyncio.Semaphore(in_flight)
        self.core = k8s_client.CoreV1Api(api)
        self.policy = k8s_client.PolicyV1Api(api)
        self.custom = k8s_client.CustomObjectsApi(api)
        #: The connections of :data:`DIRECT`'s writes: None until the first, False where a proxy is set.
        self._pool: http1.Pool | bool | None = None

    async def call(self, method: Callable[..., Awaitable[Any]], /, *args: Any, **kwargs: Any) -> Answer:
        """Call a generated API method after a token; never raises for an HTTP status or a lost connection.

        ``method`` is a bound method of :attr:`core` or :attr:`custom`; the raw response is read here, so that
        no success is ever lost to the generated client's deserialisation.
        """
        async with self._slots:
            await self.limiter.acquire()
            try:
                async with asyncio.timeout(self.timeout):
                    owner = getattr(method, "__self__", None)
                    route = DIRECT.get((type(owner).__name__, getattr(method, "__name__", "")))
                    if (
                        route is not None
                        and not args
                        and kwargs.keys() <= _DIRECT_ARGS
                        and getattr(owner, "api_client", None) is self.api
                    ):
                        status, raw, retry_after = await self._send(*route, **kwargs)
                    else:
                        response = await method(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
                        async with response:
                            raw = await response.read()
                            status = int(response.status)
                            retry_after = _seconds(response.headers.get("Retry-After"))
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                return Answer(status=0, error=f"{type(exc).__name__}: {exc}".rstrip(": "))
        return Answer(status=status, body=_json(raw), retry_after=retry_after)

    async def _send(
        self, verb: str, path: str, *, body: Any, _content_type: str = "application/json", **names: str
    ) -> tuple[int, bytes, float]:
        """One request of :data:`DIRECT`, as its generated method would send it: the path's names quoted, the JSON
        body with its content type (a patch's), the ApiClient's headers (its User-Agent) and credentials (a token read
        afresh where the kubeconfig says so); sent on the client's own connections (``scheduler.k8s.http1``), or
        through the ApiClient's aiohttp session, with its proxy, where one is set. Returns the status, the body and
        the ``Retry-After`` seconds."""
        api = self.api
        quoted = path.format(**{k: urllib.parse.quote(v, safe="") for k, v in names.items()})
        headers = {**api.default_headers, "Accept": "application/json", "Content-Type": _content_type}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        if not isinstance(body, Mapping):
            body = api.sanitize_for_serialization(body)  # a generated model, as the generated method takes it
        data = orjson.dumps(body)
        rest = api.rest_client
        if self._pool is None:
            # Where aiohttp would use a proxy, the writes go through it as every other request does.
            proxied = rest.proxy or rest.pool_manager.trust_env
            self._pool = False if proxied else http1.Pool.of(api.configuration, server_hostname=rest.server_hostname)
        if isinstance(self._pool, http1.Pool):
            reply = await self._pool.request(verb, quoted, headers=headers, body=data)
            return reply.status, reply.body, _seconds(reply.retry_after)
        options: dict[str, Any] = {}
        if rest.proxy:
            options["proxy"] = rest.proxy
        if rest.proxy_headers:
            options["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            options["server_hostname"] = rest.server_hostname
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        response = await rest.pool_manager.request(
            verb, api.configuration.host + quoted, headers=headers, data=data, timeout=timeout, **options
        )
        async with response:
            return int(response.status), await response.read(), _seconds(response.headers.get("Retry-After"))

    async def patch(
        self, method: Callable[..., Awaitable[Any]], /, *args: Any, body: Any, strategic: bool = False, **names: Any
    ) -> Answer:
        """A merge patch (``strategic``: a strategic merge patch) of ``body`` through :meth:`call`; ``args`` and
        ``names`` say which object (``name=``, ``namespace=``, or a custom resource's group, version, plural...)."""
        kind = "strategic-merge-patch" if strategic else "merge-patch"
        return await self.call(method, *args, body=body, _content_type=f"application/{kind}+json", **names)

    async def close(self) -> None:
        if isinstance(self._pool, http1.Pool):
            self._pool.close()
        await self.api.close()


async def configuration(settings: ClientSettings) -> Any:
    """A kubernetes_asyncio Configuration from in-cluster files or a kubeconfig (see :class:`ClientSettings`).

    A kubeconfig that is missing, unreadable or malformed raises :class:`InvalidObject` naming the file and what
    is wrong (the loader's own errors are a ``TypeError`` for an empty file, or "Expected key current-context"
    for a file that does not exist), so the command line reports it in one line before any long work.
    """
    conf = k8s_client.Configuration()
    in_cluster = settings.kubeconfig is None and settings.context is None and "KUBERNETES_SERVICE_HOST" in os.environ
    if in_cluster:
        try:
            k8s_config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
        except (k8s_config.ConfigException, OSError) as exc:
            raise InvalidObject(f"cannot read the in-cluster configuration: {exc}", obj="in-cluster config") from None
    else:
        path = kubeconfig_path(settings.kubeconfig)
        try:
            await k8s_config.load_kube_config(config_file=path, context=settings.context, client_configuration=conf)
        except k8s_config.ConfigException as exc:
            raise InvalidObject(_first_line(exc), obj=f"kubeconfig {path}") from None
        except yaml.YAMLError as exc:
            raise InvalidObject(f"not valid YAML: {_first_line(exc)}", obj=f"kubeconfig {path}") from None
        except OSError as exc:
            raise InvalidObject(f"cannot read: {exc.strerror or exc}", obj=f"kubeconfig {path}") from None
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            # The loader indexes into whatever YAML it got: an empty file or a list ends here.
            raise InvalidObject(f"not a kubeconfig ({type(exc).__name__}: {exc})", obj=f"kubeconfig {path}") from None
    conf.connection_pool_maxsize = settings.connections + WATCH_CONNECTIONS
    return conf


def kubeconfig_path(given: str | None) -> str:
    """The kubeconfig to load: ``given`` (a file, or files joined by ``:`` as in ``$KUBECONFIG``), else
    ``$KUBECONFIG``, else ~/.kube/config; only the files that exist (the loader merges several).

    Raises :class:`InvalidObject` when none exists or one cannot be read: the loader itself would say "Expected
    key current-context" about a file it never found.
    """
    raw = given if given is not None else os.environ.get("KUBECONFIG", "")
    candidates = [path for path in raw.split(os.pathsep) if path] or [os.path.join("~", ".kube", "config")]
    existing = [os.path.expanduser(path) for path in candidates if os.path.isfile(os.path.expanduser(path))]
    shown = os.pathsep.join(candidates)
    if not existing:
        if any(os.path.isdir(os.path.expanduser(path)) for path in candidates):
            raise InvalidObject("is a directory, not a kubeconfig file", obj=f"kubeconfig {shown}")
        hint = "" if raw else " (pass --kubeconfig, set $KUBECONFIG, or run in a pod)"
        raise InvalidObject(f"no such file{hint}", obj=f"kubeconfig {shown}")
    for path in existing:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise InvalidObject(f"cannot read: {exc.strerror}", obj=f"kubeconfig {path}") from None
    return os.pathsep.join(existing)


async def connect(settings: ClientSettings | None = None) -> Client:
    """Open a :class:`Client` (close it with :meth:`Client.close`)."""
    settings = settings or ClientSettings()
    conf = await configuration(settings)
    api = k8s_client.ApiClient(configuration=conf)
    api.user_agent = "gpusched"
    _skip_env_lookups(api)
    limiter = RateLimiter(settings.qps, settings.burst)
    log.info("api client ready", server=conf.host, qps=settings.qps, burst=settings.burst)
    return Client(api, limiter=limiter, timeout=settings.timeout, in_flight=settings.connections)


#: Environment variables that make aiohttp's ``trust_env`` matter (proxies, and a netrc file for credentials).
_ENV_LOOKUPS = ("http_proxy", "https_proxy", "ws_proxy", "wss_proxy", "all_proxy", "no_proxy", "netrc")


def _skip_env_lookups(api: Any) -> None:
    """Turn off the generated client's per-request proxy and netrc lookups when nothing in the environment asks
    for them.

    kubernetes_asyncio opens its aiohttp session with ``trust_env=True``, so every request looks up proxy
    variables and reads ``~/.netrc`` in a worker thread: profiled under a backlog of 5000 pods, that was about 8%
    of the scheduler's CPU. With no proxy or netrc variable set (and no ``~/.netrc``) the lookups find nothing,
    and skipping them changes nothing but the cost.
    """
    if any(name in os.environ or name.upper() in os.environ for name in _ENV_LOOKUPS):
        return
    if os.path.exists(os.path.expanduser("~/.netrc")):
        return
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if session is not None and hasattr(session, "_trust_env"):
        session._trust_env = False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def loads(raw: bytes | str) -> Any:
    """JSON from the API server (an answer, a watch event) as Python objects; ``ValueError`` when it is not JSON.

    orjson, not the standard library's decoder: a pod's watch event (2 to 6 kB) decodes in a third of the time
    (10.5 against 33 us for a bound pod of 2 kB on this machine), and every pod comes through here two to three
    times (listed or added, bound, and its status) besides each answer to a binding or an Event."""
    return orjson.loads(raw)


def _json(raw: bytes) -> Mapping[str, Any]:
    if not raw:
        return {}
    try:
        value = loads(raw)
    except ValueError:
        return {"message": raw[:500].decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"items": value}


def _seconds(header: str | None) -> float:
    if not header:
        return 0.0
    try:
        return max(0.0, float(header))
    except ValueError:
        return 0.0
