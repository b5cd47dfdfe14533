"""List-then-watch for pods and nodes, the two kinds a cluster has by the ten thousand.

Why not kopf for these: kopf holds every handler until all indexed objects are indexed, with one readiness
toggle per object and a notify-all to every waiting object worker per toggle dropped, so its initial listing is
quadratic in the number of objects. With 10,000 pods on 1,000 nodes, ``gpusched run`` under kopf had not
finished warming up after 4 minutes (benchmarks/startup.py); without kopf's index, nothing would say when the
initial listing is complete, and readiness needs exactly that. PodGroups, one a gang, are listed and watched here
too (``scheduler.k8s.feeds.handlers`` says why); Queues, Reservations and the Topology (a few to tens of objects)
stay with kopf.

:class:`Informer` does what client-go's reflector does, on the shared :class:`Client`:

- list in pages (``limit``/``continue``; the next page is asked for before the current one is fed, so the
  API server prepares it while this process parses), feed every object (yielding to the event loop every
  :data:`FEED_CHUNK` objects, so the lease is renewed and probes answered while 10,000 pods are read), then
  report as deleted every key the operator holds that the listing no longer has (after a relist), and set
  :attr:`listed`;
- watch from the listing's ``resourceVersion`` with bookmarks, feeding ADDED/MODIFIED/DELETED; on a closed
  stream or a lost connection watch again from the last version seen; on ``410 Gone`` list again.

Objects reach the operator in the order the API server sent them, on the event loop, one page or one event at a
time, yielding between pages so the scheduling task and the binder keep going.

:class:`StoreWatches` is what the watches of the cache's smaller stores share (DRA devices in
``scheduler.k8s.ports.device_claims``, volumes in ``scheduler.k8s.ports.volume_binding``): a few kinds feed one store,
each as its
:class:`StoredKind` says, and the store counts as listed once every one of them is.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
import structlog

from scheduler.api.basics.errors import InvalidObject
from scheduler.k8s import client as k8s_client
from scheduler.k8s.client import Answer, Client

log = structlog.get_logger(__name__)

#: Objects fed between two yields to the event loop while listing.
FEED_CHUNK = 100
#: ``on_event(body, deleted)``: the Operator's ``pod_event``/``node_event`` shape.
OnEvent = Callable[..., None]


class Gone(Exception):
    """The resourceVersion is too old (410): list again."""


class Informer:
    def __init__(
        self,
        client: Client,
        *,
        kind: str,
        list_method: Callable[..., Any],
        on_event: OnEvent,
        known: Callable[[], Iterable[str]],
        on_listed: Callable[[str], None] | None = None,
        page: int = 500,
        watch_seconds: int = 300,
        retry_seconds: float = 1.0,
    ) -> None:
        """``known()`` gives the keys (``ns/name``, or ``name`` for nodes) the operator holds of this kind;
        ``on_listed(kind)`` is called once, after the first full listing has been fed."""
        self.client = client
        self.kind = kind
        self._list = list_method
        self._on_event = on_event
        self._known = known
        self._on_listed = on_listed
        self.page = page
        self.watch_seconds = watch_seconds
        self.retry_seconds = retry_seconds
        #: Set once the first full listing has been fed.
        self.listed = asyncio.Event()
        self.resource_version = ""
        self.stats = {"lists": 0, "watches": 0, "events": 0}

    async def run(self) -> None:
        while True:
            try:
                if not self.resource_version:
                    self.resource_version = await self._relist()
                    if not self.listed.is_set():
                        self.listed.set()
                        if self._on_listed is not None:
                            self._on_listed(self.kind)
                self.resource_version = await self._watch(self.resource_version)
            except Gone:
                log.info("watch too old; listing again", kind=self.kind)
                self.resource_version = ""
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                log.warning("watch interrupted", kind=self.kind, error=f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(self.retry_seconds)

    async def _relist(self) -> str:
        seen: set[str] = set()
        token = ""
        answer = await self._page(token)
        while True:
            if answer.status == 410:
                token = ""  # the continue token expired: start over
                seen.clear()
                answer = await self._page(token)
                continue
            if not answer.ok:
                raise aiohttp.ClientError(f"listing {self.kind} failed: HTTP {answer.status} {answer.message}")
            meta = answer.body.get("metadata") or {}
            token = str(meta.get("continue") or "")
            # Ask for the next page before feeding this one: the API server prepares it while we parse.
            following = asyncio.ensure_future(self._page(token)) if token else None
            try:
                for i, item in enumerate(answer.body.get("items") or []):
                    if isinstance(item, Mapping):
                        seen.add(_key(item))
                        self._on_event(item)
                    if i % FEED_CHUNK == FEED_CHUNK - 1:
                        await asyncio.sleep(0)
                await asyncio.sleep(0)
            except BaseException:
                if following is not None:
                    following.cancel()
                raise
            if following is None:
                break
            answer = await following
        for key in set(self._known()) - seen:
            namespace, _, name = key.rpartition("/")
            self._on_event({"metadata": {"name": name, "namespace": namespace or None}}, deleted=True)
        self.stats["lists"] += 1
        log.info("listed", kind=self.kind, objects=len(seen))
        return str(meta.get("resourceVersion") or "")

    async def _page(self, token: str) -> Answer:
        kwargs: dict[str, Any] = {"limit": self.page}
        if token:
            kwargs["_continue"] = token
        return await self.client.call(self._list, **kwargs)

    async def _watch(self, version: str) -> str:
        self.stats["watches"] += 1
        response = await self._list(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_seconds,
            _preload_content=False,
            _request_timeout=self.watch_seconds + 30,
        )
        async with response:
            if response.status == 410:
                raise Gone()
            if response.status != 200:
                raise aiohttp.ClientError(
                    f"watch {self.kind}: HTTP {response.status} {_status_message(await response.read())}"
                )
            # One event per line; a chunk may hold many lines and a line span many chunks. Split once per chunk
            # (cutting the head off the buffer line by line copied the rest of the chunk for every event).
            partial: list[bytes] = []
            async for chunk in response.content.iter_any():
                if b"\n" not in chunk:
                    partial.append(chunk)
                    continue
                lines = chunk.split(b"\n")
                if partial:
                    lines[0] = b"".join((*partial, lines[0]))
                    partial.clear()
                if lines[-1]:
                    partial.append(lines[-1])
                for line in lines[:-1]:
                    if line.strip():
                        version = self._handle(k8s_client.loads(line), version)
        return version

    def _handle(self, event: Mapping[str, Any], version: str) -> str:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            return version
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise aiohttp.ClientError(f"watch {self.kind}: {obj.get('message', obj)}")
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or version)
        # Kept as each event is handled, not only when the stream ends: a watch cut off by an API server restart
        # resumes after the last event fed, instead of replaying the whole watch from where it began.
        self.resource_version = version
        if kind in ("ADDED", "MODIFIED"):
            self.stats["events"] += 1
            self._on_event(obj)
        elif kind == "DELETED":
            self.stats["events"] += 1
            self._on_event(obj, deleted=True)
        return version


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


@dataclass(frozen=True, slots=True)
class StoredKind:
    """How the objects of one watched kind go into a store."""

    #: The kind's word in Events and logs (``resourceclaim``).
    word: str
    #: Keys are ``ns/name`` (else ``name``).
    namespaced: bool
    #: The raw object into the store's type; raises :class:`InvalidObject`.
    parse: Callable[[Mapping[str, Any]], Any]
    #: Put a parsed object in; whether the store changed.
    upsert: Callable[[Any], bool]
    #: Take the object of a key out; whether the store changed.
    remove: Callable[[str], bool]
    #: The store's objects of this kind by key (what a relist reconciles).
    held: Mapping[str, Any]


class ListedStore(Protocol):
    """A store that says whether every kind feeding it has been listed (the pods that need it wait until then)."""

    listed: bool


StoreT = TypeVar("StoreT", bound=ListedStore)
#: What the watches tell the store's users when it changes (:meth:`StoreWatches.all_listed`, :meth:`StoreWatches.fed`).
OnChangeT = TypeVar("OnChangeT", bound=Callable[..., None])
#: Per kind (plural resource name): its list method, the watches' method that takes its events, and the keys of the
#: objects the store holds of it (what a relist reconciles).
Lists = Mapping[str, tuple[Callable[..., Any], OnEvent, Callable[[], Iterable[str]]]]


class StoreWatches(Generic[StoreT, OnChangeT]):
    """The watches of the kinds that feed one store: each object goes in through :meth:`feed` (what cannot be read
    is reported to ``invalid`` and left out), and the store is listed once every kind of :attr:`kinds` is.
    Subclasses say what the store's users are told (:meth:`all_listed`, :meth:`fed`)."""

    #: The kinds (plural resource names) whose informers feed the store.
    kinds: tuple[str, ...] = ()

    def __init__(
        self, store: StoreT, *, on_change: OnChangeT, invalid: Callable[[str, str, InvalidObject], None]
    ) -> None:
        self.store = store
        self._on_change = on_change
        self._invalid = invalid
        self._listed: set[str] = set()
        # Nothing is known until the listings are in.
        store.listed = False

    def part_listed(self, kind: str) -> None:
        """The informer of ``kind`` has fed its first full listing."""
        self._listed.add(kind)
        if self._listed >= set(self.kinds) and not self.store.listed:
            self.store.listed = True
            self.all_listed()

    def all_listed(self) -> None:
        """Every kind has been listed (the store has just become listed); what the store's users are told."""

    def feed(self, kind: StoredKind, body: Mapping[str, Any], deleted: bool) -> None:
        """One watched object into the store: parsed and upserted, or removed when deleted or unreadable (what cannot
        be read is not used, and is reported to ``invalid``); then :meth:`fed`."""
        meta = body.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name = str(meta.get("name") or "")
        key = f"{meta.get('namespace') or 'default'}/{name}" if kind.namespaced else name
        error: InvalidObject | None = None
        if deleted:
            changed = kind.remove(key)
        else:
            try:
                changed = kind.upsert(kind.parse(body))
            except InvalidObject as exc:
                self._invalid(kind.word, key, exc)
                error = exc
                changed = kind.remove(key)
        self.fed(kind, key, changed, error)

    def fed(self, kind: StoredKind, key: str, changed: bool, error: InvalidObject | None) -> None:
        """The object of ``key`` was fed: ``changed`` whether the store changed, ``error`` why it could not be
        read. What the store's users are told."""

    def events(self, kind: StoredKind) -> OnEvent:
        """The ``on_event(body, *, deleted=False)`` of the objects of ``kind``: each into :meth:`feed`."""

        def on_event(body: Mapping[str, Any], *, deleted: bool = False) -> None:
            self.feed(kind, body, deleted)

        return on_event

    def informers(
        self, client: Client, lists: Mapping[str, tuple[Callable[..., Any], StoredKind]]
    ) -> dict[str, Informer]:
        """The list-then-watch loop of each kind (plural resource name) of ``lists``, from its list method, feeding
        these watches as its :class:`StoredKind` says."""
        loops: Lists = {
            plural: (method, self.events(kind), functools.partial(list, kind.held))
            for plural, (method, kind) in lists.items()
        }
        return informers(client, loops, on_listed=self.part_listed)


def informers(client: Client, lists: Lists, *, on_listed: Callable[[str], None]) -> dict[str, Informer]:
    """The list-then-watch loop of each kind of ``lists``; ``on_listed(kind)`` once each has fed its first listing."""
    return {
        kind: Informer(client, kind=kind, list_method=method, on_event=on_event, known=known, on_listed=on_listed)
        for kind, (method, on_event, known) in lists.items()
    }


def _status_message(body: bytes) -> str:
    """What a refused watch's answer says: its Status message whole (an operator reads which right is missing from
    it: "... cannot watch resource ... in API group ..."), else the start of the body."""
    try:
        status = k8s_client.loads(body)
    except ValueError:
        status = None
    if isinstance(status, Mapping) and isinstance(status.get("message"), str):
        return str(status["message"])
    return repr(body[:200])
