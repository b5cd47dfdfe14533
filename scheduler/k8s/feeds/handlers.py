"""The kopf side of the operator: Queues, the Topology, Reservations and Namespaces, and kopf settings that keep it
read-only; and the PodGroups' own watch, which waits for the same CRDs.

Only ``@kopf.index`` and ``@kopf.on.event`` handlers are registered: kopf's create/update/resume handlers keep
their progress and a diff base on the objects (annotations and patches), and finalizers would make the scheduler
a party to every deletion. The settings below make that impossible even by mistake: progress and diff-base
storages that store nothing, no posting of kopf's own log lines as Events, no peering (the Lease in
``scheduler.k8s.leader`` decides who schedules), no CRD scanning (so no cluster-wide CRD read).

Pods and nodes are not here: ``scheduler.k8s.feeds.informer`` explains why (kopf's initial listing is quadratic in
the number of objects). PodGroups are not given to kopf either (:func:`podgroup_informer`): there is one a gang, and
each changes as its members are placed and bound (the scheduler writes its status), so their events come by the
gang, not by the configuration change. kopf's handling of each (its index, causes and handler invocation) took 5 to 7%
of the scheduler's CPU in a backlog of 200 gangs of 8 (docs/performance.md); the informer hands the same objects to
the same method (:meth:`Operator.podgroup_event`). scheduler-plugins' PodGroups, read only for compatibility, stay
with kopf.

Why index handlers feed the operator: kopf runs them for every object of the initial listing *before* any
other handler, and holds every ``on.event`` handler, of any resource, until all indexed resources are listed
and indexed. So the first ``on.event`` call on Namespaces (which every cluster has) is the moment the
Queues, Reservations and the Topology of the first full listing are in: :meth:`Operator.part_listed` marks it
(the PodGroups' informer marks its own listing). The
indexes themselves hold nothing (the handlers return None). Deletions reach only ``on.event`` handlers (kopf drops
deleted objects from indexes without calling them), so those handle ``DELETED``.

Why kopf starts only once the CRDs are served (:func:`watch`): with scanning disabled (above), kopf looks up the
API's resources once, at its start. A replica started while the API server is still coming up could find the
CRDs not served yet; kopf then logged "Unresolved resources cannot be served", never looked again and, holding no
index for them, let the first Namespace event through at once: the replica was ready with no Queue and no
PodGroup, took the Lease, and the gangs' pods were never bound. So :func:`watch` first asks the API's discovery
(which every authenticated client may read) until all of :data:`CRDS` are served, and only then starts kopf,
whose one scan then finds them all, so all of them are indexed before readiness. Until then the replica is not
ready. The PodGroups' informer waits for the same (:class:`_PodGroups`), rather than log a failed listing each second,
and the two share one wait (:func:`served`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

import kopf
import structlog

from scheduler.k8s import client as k8s_client
from scheduler.k8s.feeds import informer
from scheduler.k8s.operator import Operator

log = structlog.get_logger(__name__)

GROUP = "scheduling.gpusched.io"
VERSION = "v1alpha1"
#: The custom resources the scheduler reads (by kopf's index or :func:`podgroup_informer`): readiness waits until
#: each is served and listed.
CRDS = frozenset({"podgroups", "queues", "topologies", "reservations"})
#: The PodGroups' plural, and their listing's name in ``scheduler.k8s.feeds.feed.LISTINGS``.
PODGROUPS = "podgroups"
#: scheduler-plugins' PodGroups, read as gangs when their CRD is served at start (``Operator.compat_podgroup_event``).
COMPAT_GROUP = "scheduling.x-k8s.io"
COMPAT_VERSION = "v1alpha1"
#: Seconds between two looks at the API's discovery while a CRD is not served.
SERVED_RETRY_S = 1.0
#: Seconds between two log lines saying which CRDs are still not served.
SERVED_LOG_S = 30.0


class _NoStorage(kopf.ProgressStorage, kopf.DiffBaseStorage):
    """Keeps nothing on the objects: the scheduler's handlers need neither progress nor a diff base."""

    def fetch(self, **_: Any) -> None:
        return None

    def store(self, **_: Any) -> None:
        return None

    def purge(self, **_: Any) -> None:
        return None

    def touch(self, **_: Any) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


def settings() -> Any:
    """kopf settings for a read-only operator (see the module notes)."""
    s = kopf.OperatorSettings()
    nothing = _NoStorage()
    s.persistence.progress_storage = nothing
    s.persistence.diffbase_storage = nothing
    s.posting.enabled = False
    s.scanning.disabled = True
    s.peering.standalone = True
    # Handlers are async and cheap; kopf would run sync ones in threads, which the cache is not made for.
    s.execution.max_workers = 1
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    logging.getLogger("kopf").setLevel(logging.WARNING)
    return s


def registry(operator: Operator, client_settings: k8s_client.ClientSettings, *, compat: bool = False) -> Any:
    """A kopf registry with the scheduler's handlers, feeding ``operator``; ``compat``: scheduler-plugins'
    PodGroups are served, so they are watched too."""
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg)
    async def login(**_: Any) -> Any:
        return await connection_info(client_settings)

    def feed(resource: tuple[str, ...], method: Any) -> None:
        @kopf.index(*resource, registry=reg, id=f"feed-{resource[-1]}")
        async def index(body: Any, **_: Any) -> None:
            method(body)

        @kopf.on.event(*resource, registry=reg, id=f"deleted-{resource[-1]}")
        async def deleted(type: str, body: Any, **_: Any) -> None:
            if type == "DELETED":
                method(body, deleted=True)

    feed((GROUP, VERSION, "queues"), operator.queue_event)
    # Indexed, so that an Available Reservation is held again before the first cycle (a restart, a new leader).
    feed((GROUP, VERSION, "reservations"), operator.reservation_event)
    # Indexed too, so the Topology is in before the first listing ends and no decision uses the built-in levels.
    feed((GROUP, VERSION, "topologies"), operator.topology_event)
    # Indexed, so every namespace's default queue is known before the first pod is grouped.
    feed(("v1", "namespaces"), operator.namespace_event)
    if compat:
        feed((COMPAT_GROUP, COMPAT_VERSION, "podgroups"), operator.compat_podgroup_event)

    @kopf.on.event("v1", "namespaces", registry=reg)
    async def listed(**_: Any) -> None:
        operator.part_listed("custom resources")

    return reg


def podgroup_informer(client: k8s_client.Client, operator: Operator) -> informer.Informer:
    """The list-then-watch loop of PodGroups (see the module notes), feeding :meth:`Operator.podgroup_event`; it
    lists once :data:`CRDS` are served, and its first listing is the part ``podgroups`` of the operator's."""
    return _PodGroups(
        client,
        kind=PODGROUPS,
        list_method=functools.partial(client.custom.list_cluster_custom_object, GROUP, VERSION, PODGROUPS),
        on_event=operator.podgroup_event,
        known=operator.podgroup_keys,
        on_listed=operator.part_listed,
    )


class _PodGroups(informer.Informer):
    """An informer that starts listing once the CRDs are served, as kopf starts (see the module notes)."""

    async def run(self) -> None:
        await served(self.client)
        await super().run()


async def not_served(client: k8s_client.Client) -> frozenset[str]:
    """Which of :data:`CRDS` the API server does not serve now (all of them when it does not answer)."""
    answer = await client.call(client.custom.get_api_resources, GROUP, VERSION)
    if not answer.ok:
        return CRDS
    resources = answer.body.get("resources")
    names = {str(r.get("name")) for r in resources if isinstance(r, dict)} if isinstance(resources, list) else set()
    return CRDS - names


async def compat_served(client: k8s_client.Client) -> bool:
    """Whether scheduler-plugins' PodGroup CRD is served now (looked at once, before kopf starts: a CRD installed
    later is read after the scheduler's next restart)."""
    answer = await client.call(client.custom.get_api_resources, COMPAT_GROUP, COMPAT_VERSION)
    resources = answer.body.get("resources") if answer.ok else None
    return isinstance(resources, list) and any(isinstance(r, dict) and r.get("name") == "podgroups" for r in resources)


async def wait_until_served(client: k8s_client.Client, *, retry_s: float | None = None) -> None:
    """Return once every one of :data:`CRDS` is served (see the module notes); log which are not, now and then.
    ``retry_s`` is :data:`SERVED_RETRY_S` unless given."""
    retry_s = SERVED_RETRY_S if retry_s is None else retry_s
    loop = asyncio.get_running_loop()
    last_log = loop.time() - SERVED_LOG_S
    while missing := await not_served(client):
        if loop.time() - last_log >= SERVED_LOG_S:
            last_log = loop.time()
            log.warning(
                "custom resources not served yet; not ready until they are",
                group=f"{GROUP}/{VERSION}",
                missing=sorted(missing),
            )
        await asyncio.sleep(retry_s)


class _SharedWait:
    """One :func:`wait_until_served` of a client and how many await it (see :func:`served`)."""

    __slots__ = ("task", "waiting")

    def __init__(self, client: k8s_client.Client) -> None:
        self.task: asyncio.Future[None] = asyncio.ensure_future(wait_until_served(client))
        self.waiting = 0


#: The waits in progress, by the client's identity; an entry lives while someone awaits it.
_SHARED: dict[int, _SharedWait] = {}


async def served(client: k8s_client.Client) -> None:
    """:func:`wait_until_served`, one wait shared by all who await it on the same client: kopf's watch and the
    PodGroups' informer then make one discovery request a retry and one warning now and then, not two. One who is
    cancelled leaves the others waiting; the wait itself ends when the last of them leaves."""
    shared = _SHARED.get(id(client))
    if shared is None:
        shared = _SHARED[id(client)] = _SharedWait(client)
    shared.waiting += 1
    try:
        await asyncio.shield(shared.task)
    finally:
        shared.waiting -= 1
        if shared.waiting == 0:
            del _SHARED[id(client)]
            shared.task.cancel()


async def watch(
    operator: Operator,
    client: k8s_client.Client,
    client_settings: k8s_client.ClientSettings,
    *,
    stop_flag: asyncio.Event,
    started: Callable[[], None] = lambda: None,
) -> None:
    """Wait until the CRDs are served, then run kopf's watches until ``stop_flag`` is set.

    kopf puts its own SIGINT and SIGTERM handlers on the event loop as it starts (a second signal then raised
    ``InvalidStateError`` in them); ``started()`` is called right after, for the caller to put its own back.
    """
    crds = asyncio.ensure_future(served(client))
    stopped = asyncio.ensure_future(stop_flag.wait())
    try:
        await asyncio.wait({crds, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        crds.cancel()
        stopped.cancel()
    if not crds.done() or crds.cancelled():
        return  # stopped before the CRDs were served
    crds.result()
    compat = await compat_served(client)
    if compat:
        log.info("scheduler-plugins PodGroups are served: read as gangs", group=f"{COMPAT_GROUP}/{COMPAT_VERSION}")
    existing = asyncio.all_tasks()
    tasks = await kopf.spawn_tasks(
        registry=registry(operator, client_settings, compat=compat),
        settings=settings(),
        clusterwide=True,
        standalone=True,
        stop_flag=stop_flag,
    )
    started()
    await kopf.run_tasks(tasks, ignored=existing)


async def connection_info(settings: k8s_client.ClientSettings) -> Any:
    """kopf's credentials from the same kubeconfig or in-cluster files the API client uses."""
    conf = await k8s_client.configuration(settings)
    token = conf.api_key.get("authorization") or conf.api_key.get("BearerToken") or ""
    scheme = None
    if token:
        prefix = conf.api_key_prefix.get("authorization", "")
        scheme, _, value = (f"{prefix} {token}" if prefix else token).partition(" ")
        token = value or scheme
        scheme = scheme if value else "Bearer"
    return kopf.ConnectionInfo(
        server=conf.host,
        ca_path=conf.ssl_ca_cert or None,
        insecure=not conf.verify_ssl,
        certificate_path=conf.cert_file or None,
        private_key_path=conf.key_file or None,
        scheme=scheme,
        token=token or None,
        username=conf.username or None,
        password=conf.password or None,
        default_namespace="default",
    )
