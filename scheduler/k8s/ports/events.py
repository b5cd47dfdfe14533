"""Kubernetes Events for what the scheduling loop reports (``Scheduled``, ``FailedScheduling``...).

:class:`EventRecorder` implements the loop's ``Events`` protocol. ``emit`` never blocks and never fails: it puts
the event in a bounded in-box (a full in-box drops the event and counts it) and a background task writes
core/v1 Events (``reportingComponent`` gpusched, ``action`` Scheduling), as client-go's recorder does:

- the same (object, type, reason, message) again within ``window`` seconds of its last sighting is one Event
  whose ``count`` and ``lastTimestamp`` go up; the count is PATCHed at most once per ``patch_interval`` per
  Event, so a pod failing every cycle costs one write every few seconds, not one per cycle;
- more than ``similar_limit`` different messages with the same (object, type, reason) within ``window`` seconds
  are combined into one Event, ``(combined from similar events): <latest message>``, counted up like any other
  (client-go's EventAggregator), so a gang member whose message changes with every count stays one Event;
- each object may start at most ``object_burst`` new Events, then one more per ``object_refill`` seconds
  (client-go's spam filter), so a pod whose message changes every cycle cannot flood etcd;
- an Event the API server no longer has (Events expire after an hour) is created again.

Objects are named as the loop names them: ``"pod ns/name"``, ``"podgroup ns/name"``, ``"queue name"``.
``kubectl describe`` finds Events by the object's UID, which the loop does not carry; the operator passes
``uid_of(kind, key)`` (from its cache) so Events name the UID too.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import math
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from scheduler.k8s import worker
from scheduler.k8s.client import REASON_ALREADY_EXISTS, Answer, Client

log = structlog.get_logger(__name__)

COMPONENT = "gpusched"
ACTION = "Scheduling"
#: events.k8s.io caps a note at 1 kB; keep core/v1 messages to the same.
MESSAGE_LIMIT = 1024
#: What a combined Event's message starts with (client-go's words).
COMBINED = "(combined from similar events): "
#: The message part of a combined Event's key: no real message has it.
_COMBINED_KEY = "\x00combined"

#: The loop's object words -> (apiVersion, kind, namespaced).
KINDS: dict[str, tuple[str, str, bool]] = {
    "pod": ("v1", "Pod", True),
    "podgroup": ("scheduling.gpusched.io/v1alpha1", "PodGroup", True),
    "queue": ("scheduling.gpusched.io/v1alpha1", "Queue", False),
    "reservation": ("scheduling.gpusched.io/v1alpha1", "Reservation", True),
    "topology": ("scheduling.gpusched.io/v1alpha1", "Topology", False),
    "node": ("v1", "Node", False),
    "poddisruptionbudget": ("policy/v1", "PodDisruptionBudget", True),
    "persistentvolumeclaim": ("v1", "PersistentVolumeClaim", True),
    "persistentvolume": ("v1", "PersistentVolume", False),
    "storageclass": ("storage.k8s.io/v1", "StorageClass", False),
    "csinode": ("storage.k8s.io/v1", "CSINode", False),
    "deviceclass": ("resource.k8s.io/v1", "DeviceClass", False),
    "resourceslice": ("resource.k8s.io/v1", "ResourceSlice", False),
    "resourceclaim": ("resource.k8s.io/v1", "ResourceClaim", True),
    "noderesourcetopology": ("topology.node.k8s.io/v1alpha2", "NodeResourceTopology", False),
}


@dataclass(frozen=True, slots=True)
class EventSettings:
    #: Events waiting to be written; beyond this ``emit`` drops (``stats["dropped"]``). A backlog of thousands
    #: of pods placed at 100+ a second emits one ``Scheduled`` Event each, faster than they are written.
    queue_size: int = 10_000
    #: Seconds after its last sighting within which the same event counts up instead of starting a new one.
    window: float = 600.0
    #: Seconds between two writes of the same Event (its count).
    patch_interval: float = 5.0
    #: Event writes in flight at once (one ``Scheduled`` Event per pod bound: as many as bindings, nearly).
    writers: int = 16
    #: Events remembered for counting up (the least recently seen are forgotten beyond this once written).
    series_limit: int = 4096
    #: Different messages with one (object, type, reason) within ``window`` before they are combined (client-go: 10).
    similar_limit: int = 10
    #: New Events one object may start at once, then one per ``object_refill`` seconds.
    object_burst: int = 25
    object_refill: float = 300.0
    #: ``reportingInstance``: which replica wrote it.
    instance: str = field(default_factory=socket.gethostname)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about."""

    word: str
    api_version: str
    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def event_namespace(self) -> str:
        # Events about cluster-scoped objects live in "default", as kube's do for nodes.
        return self.namespace or "default"


def parse_object(obj: str) -> ObjectRef:
    """``"pod ns/name"`` -> an ObjectRef; ValueError for anything else."""
    word, _, key = obj.partition(" ")
    if word not in KINDS or not key:
        raise ValueError(f"cannot tell which object {obj!r} is (expected 'pod ns/name', 'podgroup ns/name', ...)")
    api_version, kind, namespaced = KINDS[word]
    namespace, _, name = key.rpartition("/")
    if namespaced != bool(namespace) or not name:
        raise ValueError(f"{obj!r}: a {kind} is named {'ns/name' if namespaced else 'name'}")
    return ObjectRef(word, api_version, kind, namespace, name)


@dataclass(slots=True)
class _Series:
    """One Event and how often it happened."""

    ref: ObjectRef
    type: str
    reason: str
    message: str
    first: float
    last: float
    count: int = 1
    #: The count the API server has.
    written: int = 0
    #: The Event's name once created.
    name: str = ""
    #: When it was last written (time.monotonic(): pacing does not follow the wall clock).
    written_at: float = float("-inf")
    writing: bool = False


#: Unwritten Events moved to the back per trim before giving up until the next one (bounds a trim's cost).
_TRIM_ROTATIONS = 8

_Key = tuple[str, str, str, str]
_Item = tuple[str, str, str, str, float]


class EventRecorder(worker.BackgroundWriter):
    """Writes Events in the background; see the module notes. ``start()`` it on the event loop."""

    def __init__(
        self,
        client: Client,
        *,
        settings: EventSettings | None = None,
        uid_of: Callable[[str, str], str] | None = None,
        clock: Callable[[], float] = time.time,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """``clock`` gives Unix seconds for the Events' timestamps and the counting ``window``."""
        self.client = client
        self.settings = settings or EventSettings()
        self._uid_of = uid_of
        self._clock = clock
        self._loop = loop
        self._inbox: deque[_Item] = deque()
        self._series: OrderedDict[_Key, _Series] = OrderedDict()
        self._dirty: set[_Key] = set()
        #: Per (object, type, reason): when its window started and the messages seen in it.
        self._similar: OrderedDict[tuple[str, str, str], tuple[float, set[str]]] = OrderedDict()
        #: Per object: (tokens, when counted) of its new-Event budget.
        self._budget: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._force = False
        self._last_name_ns = 0
        self.stats = {
            "emitted": 0,
            "created": 0,
            "patched": 0,
            "aggregated": 0,
            "combined": 0,
            "dropped": 0,
            "rate_limited": 0,
            "invalid": 0,
            "errors": 0,
        }

    # --- the Events protocol -----------------------------------------------------------------------------------

    def emit(self, *, obj: str, kind: str, reason: str, message: str) -> None:
        """Queue an Event (``kind`` is its type, Normal or Warning); returns at once, from any thread."""
        item = (obj, kind, reason, message[:MESSAGE_LIMIT], self._clock())
        loop = self._loop
        if loop is None or _running_loop() is loop:
            self._offer(item)
        else:
            loop.call_soon_threadsafe(self._offer, item)

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def recent(self, obj: str) -> list[str]:
        """What this replica said lately about ``obj`` (``pod NS/NAME``, ``podgroup NS/NAME``), oldest first: the
        Events it still counts up, as ``TYPE REASON (xCOUNT): MESSAGE`` (the dashboard's job page)."""
        said = sorted((s for (o, *_), s in self._series.items() if o == obj), key=lambda s: s.first)
        return [f"{s.type} {s.reason} (x{s.count}): {s.message}" for s in said]

    def start(self) -> None:
        if self._worker is None:
            self._loop = asyncio.get_running_loop()
            self._worker = self._loop.create_task(self._run(), name="gpusched events")

    # --- the work ----------------------------------------------------------------------------------------------

    def _offer(self, item: _Item) -> None:
        self.stats["emitted"] += 1
        if len(self._inbox) >= self.settings.queue_size:
            self.stats["dropped"] += 1
            return
        self._inbox.append(item)
        self._wake.set()

    def _idle(self) -> bool:
        return not self._inbox and not self._dirty and not self._tasks

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            while self._inbox:
                self._take(*self._inbox.popleft())
            delay = self._flush_due()
            # Not asyncio.wait_for: with a deadline (a count waiting for its next write) it makes a task for each
            # wait, and in Python 3.11 it swallows a cancel that comes as the wake is set: the worker never ended.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    def _take(self, obj: str, type_: str, reason: str, message: str, at: float) -> None:
        key = (obj, type_, reason, message)
        if self._similar_seen(obj, type_, reason, message, at):
            key = (obj, type_, reason, _COMBINED_KEY)
            message = (COMBINED + message)[:MESSAGE_LIMIT]
            self.stats["combined"] += 1
        series = self._series.get(key)
        if series is not None and at - series.last <= self.settings.window:
            series.count += 1
            series.last = max(series.last, at)
            series.message = message
            self._series.move_to_end(key)
            self._dirty.add(key)
            self.stats["aggregated"] += 1
            return
        try:
            ref = parse_object(obj)
        except ValueError as exc:
            self.stats["invalid"] += 1
            log.warning("event for an unknown object", error=str(exc), reason=reason)
            return
        if not self._allow(obj, at):
            self.stats["rate_limited"] += 1
            return
        self._series[key] = _Series(ref, type_, reason, message, first=at, last=at)
        self._series.move_to_end(key)
        self._dirty.add(key)
        self._trim()

    def _similar_seen(self, obj: str, type_: str, reason: str, message: str, at: float) -> bool:
        """Whether ``message`` is beyond the ``similar_limit`` different messages of its (object, type, reason) in
        the current window (then it joins their combined Event)."""
        group = (obj, type_, reason)
        seen = self._similar.pop(group, None)
        if seen is None or at - seen[0] > self.settings.window:
            seen = (at, set())
        self._similar[group] = seen
        while len(self._similar) > self.settings.series_limit:
            self._similar.popitem(last=False)
        messages = seen[1]
        if message in messages:
            return False
        if len(messages) < self.settings.similar_limit:
            messages.add(message)
            return False
        return True

    def _trim(self) -> None:
        """Forget the least recently seen Events beyond ``series_limit``, but not one still to be written (a
        burst of pods placed faster than their Events are written would lose those): such an Event goes to
        the back, a few per call, so the series stay bounded by ``series_limit`` plus ``queue_size`` without
        a scan of all of them. Past that bound the oldest is forgotten written or not (``stats["dropped"]``)."""
        s = self.settings
        rotations = 0
        while len(self._series) > s.series_limit:
            key = next(iter(self._series))
            series = self._series[key]
            unwritten = key in self._dirty or series.writing
            if unwritten and len(self._series) <= s.series_limit + s.queue_size:
                if rotations >= _TRIM_ROTATIONS:
                    return
                rotations += 1
                self._series.move_to_end(key)
                continue
            if unwritten:
                self.stats["dropped"] += 1
            self._series.popitem(last=False)
            self._dirty.discard(key)

    def _allow(self, obj: str, at: float) -> bool:
        s = self.settings
        tokens, stamp = self._budget.pop(obj, (float(s.object_burst), at))
        tokens = min(float(s.object_burst), tokens + max(0.0, at - stamp) / s.object_refill)
        allowed = tokens >= 1.0
        self._budget[obj] = (tokens - 1.0 if allowed else tokens, at)
        while len(self._budget) > s.series_limit:
            self._budget.popitem(last=False)
        return allowed

    def _flush_due(self) -> float | None:
        """Start the writes that are due; return seconds until the next one is."""
        now = time.monotonic()
        next_due: float | None = None
        gone: list[_Key] = []
        # Read in place, not copied: a backlog of thousands of pods bound faster than their Events are written
        # keeps thousands dirty, and this runs at every emit and every write that ends (a copy of the set each time
        # was 1.3% of the scheduler's CPU under benchmarks/e2e_throughput.py). Nothing below changes the set.
        for key in self._dirty:
            series = self._series.get(key)
            if series is None:
                gone.append(key)
                continue
            if series.writing:
                continue
            # A new Event is due at once; a count, or a retry after a failure, waits out the interval.
            due = now if self._force else series.written_at + self.settings.patch_interval
            if due > now:
                next_due = due if next_due is None else min(next_due, due)
                continue
            if len(self._tasks) >= self.settings.writers:
                break  # a finishing write wakes the worker
            series.writing = True
            task = asyncio.get_running_loop().create_task(self._write(key, series))
            self._tasks.add(task)
            task.add_done_callback(self._written)
        self._dirty.difference_update(gone)
        return None if next_due is None else max(0.0, next_due - now)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()

    async def _write(self, key: _Key, series: _Series) -> None:
        count = series.count
        try:
            if series.name:
                answer = await self._patch(series)
                if answer.status == 404:
                    series.name = ""  # expired: create it again
                    answer = await self._create(series)
            else:
                answer = await self._create(series)
        except Exception:
            log.exception("writing an event raised", object=key[0], reason=series.reason)
            answer = Answer(status=0, error="exception")
        finally:
            series.writing = False
            series.written_at = time.monotonic()
        if answer.ok:
            series.written = count
            if series.count == count:
                self._dirty.discard(key)
            return
        self.stats["errors"] += 1
        if answer.answered and answer.status < 500 and answer.status != 429:
            # Refused for good (namespace gone, forbidden, invalid): give up on this Event.
            self._dirty.discard(key)
            self._series.pop(key, None)
            log.warning(
                "event refused", object=key[0], reason=series.reason, status=answer.status, error=answer.message
            )
        else:
            log.info("event write failed; retrying later", object=key[0], reason=series.reason, error=answer.message)

    async def _create(self, series: _Series) -> Answer:
        ref = series.ref
        for _ in range(2):
            name = self._event_name(ref.name)
            answer = await self.client.call(
                self.client.core.create_namespaced_event, namespace=ref.event_namespace, body=self._body(series, name)
            )
            if answer.ok:
                series.name = name
                self.stats["created"] += 1
            if not (answer.status == 409 and answer.reason == REASON_ALREADY_EXISTS):
                return answer
        return answer

    async def _patch(self, series: _Series) -> Answer:
        body: dict[str, Any] = {"count": series.count, "lastTimestamp": rfc3339(series.last)}
        if series.message.startswith(COMBINED):
            body["message"] = series.message
        answer = await self.client.patch(
            self.client.core.patch_namespaced_event, name=series.name, namespace=series.ref.event_namespace, body=body
        )
        if answer.ok:
            self.stats["patched"] += 1
        return answer

    def _body(self, series: _Series, name: str) -> dict[str, Any]:
        ref = series.ref
        involved: dict[str, Any] = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        uid = self._uid_of(ref.word, ref.key) if self._uid_of is not None else ""
        if uid:
            involved["uid"] = uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ref.event_namespace},
            "involvedObject": involved,
            "type": series.type,
            "reason": series.reason,
            "message": series.message,
            "count": series.count,
            "firstTimestamp": rfc3339(series.first),
            "lastTimestamp": rfc3339(series.last),
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.settings.instance,
            "action": ACTION,
        }

    def _event_name(self, object_name: str) -> str:
        # As client-go names them: <object>.<unix nanoseconds in hex>, made unique within this process.
        self._last_name_ns = max(time.time_ns(), self._last_name_ns + 1)
        return f"{object_name}.{self._last_name_ns:x}"


def rfc3339(seconds: float) -> str:
    """Unix seconds -> ``2024-05-01T12:00:00Z`` (what metav1.Time accepts)."""
    return _rfc3339_second(math.floor(seconds))


@functools.lru_cache(maxsize=16)
def _rfc3339_second(second: int) -> str:
    # Each Event and condition writes one to three of these, mostly of the same second: made once a second, not 3 us
    # of strftime each time.
    return datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
