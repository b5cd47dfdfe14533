"""Events: what users see in ``kubectl describe``, counted up instead of repeated, never blocking the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

import pytest

from scheduler.k8s import client as k8s
from scheduler.k8s.ports.events import EventRecorder, EventSettings, parse_object, rfc3339
from tests.k8s.fakeapi import Canned, FakeApiServer, eventually, status

FAILED = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def recorder_factory(client: k8s.Client, clock: Clock) -> AsyncIterator[Callable[..., EventRecorder]]:
    made: list[EventRecorder] = []

    def make(**settings: object) -> EventRecorder:
        recorder = EventRecorder(
            client,
            settings=EventSettings(instance="gpusched-0", **settings),  # type: ignore[arg-type]
            uid_of=lambda word, key: f"uid-{word}-{key}",
            clock=clock,
        )
        recorder.start()
        made.append(recorder)
        return recorder

    yield make
    for recorder in made:
        await recorder.close()


async def test_an_event_names_the_pod_and_the_scheduler(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder], clock: Clock
) -> None:
    recorder = recorder_factory()
    recorder.emit(obj="pod ns/p", kind="Normal", reason="Scheduled", message="assigned to gpu-0 (GPUs 0,3)")
    assert await recorder.flush()
    ((namespace, name), event) = next(iter(fake.events.items()))
    assert namespace == "ns" and name.startswith("p.")
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "p",
        "uid": "uid-pod-ns/p",
    }
    assert event["type"] == "Normal"
    assert event["reason"] == "Scheduled"
    assert event["message"] == "assigned to gpu-0 (GPUs 0,3)"
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"] == rfc3339(clock.now) == "2023-11-14T22:13:20Z"
    assert event["source"] == {"component": "gpusched"}
    assert event["reportingComponent"] == "gpusched"
    assert event["reportingInstance"] == "gpusched-0"
    assert event["action"] == "Scheduling"


async def test_the_same_event_counts_up_with_few_writes(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder], clock: Clock
) -> None:
    # A count is written at most once an hour here: 49 more sightings are one PATCH, when the recorder is flushed.
    recorder = recorder_factory(patch_interval=3600.0)
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    await eventually(lambda: len(fake.events) == 1)
    for _ in range(49):
        clock.now += 1
        recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
        await asyncio.sleep(0)  # the writer may run between sightings
    assert await recorder.flush()
    (event,) = fake.events.values()
    assert event["count"] == 50
    assert event["lastTimestamp"] == rfc3339(clock.now)
    assert event["firstTimestamp"] == rfc3339(clock.now - 49)
    assert len(fake.requests("POST", "/events")) == 1
    (patch,) = fake.requests("PATCH")
    assert patch.content_type == "application/merge-patch+json"
    assert recorder.stats["aggregated"] == 49


async def test_a_different_message_or_reason_is_another_event(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder]
) -> None:
    recorder = recorder_factory()
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message="0/3 nodes: 3 gang")
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedBinding", message=FAILED)
    recorder.emit(obj="pod ns/q", kind="Warning", reason="FailedScheduling", message=FAILED)
    assert await recorder.flush()
    assert len(fake.events) == 4
    assert all(e["count"] == 1 for e in fake.events.values())


async def test_after_the_window_the_same_event_starts_anew(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder], clock: Clock
) -> None:
    recorder = recorder_factory(window=60.0)
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    assert await recorder.flush()
    clock.now += 61
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    assert await recorder.flush()
    assert len(fake.events) == 2
    assert sorted(e["firstTimestamp"] for e in fake.events.values()) == [
        rfc3339(clock.now - 61),
        rfc3339(clock.now),
    ]


async def test_each_object_may_start_only_so_many_events(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder], clock: Clock
) -> None:
    recorder = recorder_factory(object_burst=3, object_refill=60.0)
    for i in range(5):
        recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=f"attempt {i}")
    recorder.emit(obj="pod ns/other", kind="Warning", reason="FailedScheduling", message="attempt 0")
    assert await recorder.flush()
    assert sorted(e["message"] for e in fake.events.values() if e["involvedObject"]["name"] == "p") == [
        "attempt 0",
        "attempt 1",
        "attempt 2",
    ]
    assert recorder.stats["rate_limited"] == 2
    assert len(fake.events) == 4  # another object has its own budget
    # Counting up an existing Event is not limited; a minute later there is room for one more new Event.
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message="attempt 0")
    clock.now += 60
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message="attempt 5")
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message="attempt 6")
    assert await recorder.flush()
    assert len(fake.events) == 5
    assert recorder.stats["rate_limited"] == 3


async def test_emit_never_blocks_and_drops_when_full(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder]
) -> None:
    recorder = recorder_factory(queue_size=5)
    # No await in between: the writer task cannot run, so the in-box fills up.
    for i in range(20):
        recorder.emit(obj=f"pod ns/p{i}", kind="Normal", reason="Scheduled", message="assigned")
    assert recorder.stats["dropped"] == 15
    assert await recorder.flush()
    assert len(fake.events) == 5


async def test_a_burst_beyond_the_remembered_events_still_writes_every_one(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder]
) -> None:
    # 50 pods placed at once, more than the recorder remembers for counting up: none of their Events is lost
    # while waiting for its write; the written ones are then forgotten down to the limit.
    recorder = recorder_factory(series_limit=10, queue_size=100, writers=2)
    for i in range(50):
        recorder.emit(obj=f"pod ns/p{i}", kind="Normal", reason="Scheduled", message="assigned")
    assert await recorder.flush()
    assert len(fake.events) == 50
    assert recorder.stats["dropped"] == 0
    recorder.emit(obj="pod ns/last", kind="Normal", reason="Scheduled", message="assigned")
    assert await recorder.flush()
    assert len(recorder._series) <= 10


async def test_podgroup_and_queue_events(fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder]) -> None:
    recorder = recorder_factory()
    recorder.emit(obj="podgroup ns/g", kind="Warning", reason="FailedScheduling", message="2 of 4 fit")
    recorder.emit(obj="queue team-a", kind="Normal", reason="Reclaimed", message="1 GPU")
    recorder.emit(obj="service n", kind="Normal", reason="Nope", message="unknown kind")
    assert await recorder.flush()
    refs = {(ns, e["involvedObject"]["kind"]): e["involvedObject"] for (ns, _), e in fake.events.items()}
    assert refs[("ns", "PodGroup")] == {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "PodGroup",
        "namespace": "ns",
        "name": "g",
        "uid": "uid-podgroup-ns/g",
    }
    # Events about a cluster-scoped object live in "default".
    assert refs[("default", "Queue")]["name"] == "team-a"
    assert "namespace" not in refs[("default", "Queue")]
    assert recorder.stats["invalid"] == 1
    assert len(fake.events) == 2


async def test_an_expired_event_is_created_again(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder]
) -> None:
    recorder = recorder_factory()
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    assert await recorder.flush()
    fake.events.clear()  # the API server let it expire
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    assert await recorder.flush()
    (event,) = fake.events.values()
    assert event["count"] == 2


async def test_a_failed_count_write_is_retried(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder]
) -> None:
    recorder = recorder_factory(patch_interval=0.05)
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    assert await recorder.flush()
    fake.event_patch_answers.append(Canned(503, status(503, "ServiceUnavailable", "busy")))
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=FAILED)
    await eventually(lambda: next(iter(fake.events.values()))["count"] == 2)
    assert recorder.stats["errors"] == 1
    assert len(fake.requests("PATCH")) == 2


async def test_emit_from_another_thread(fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder]) -> None:
    recorder = recorder_factory()
    thread = threading.Thread(
        target=lambda: recorder.emit(obj="pod ns/p", kind="Normal", reason="Scheduled", message="assigned")
    )
    thread.start()
    await asyncio.to_thread(thread.join)
    await eventually(lambda: len(fake.events) == 1)


def test_parse_object() -> None:
    assert parse_object("pod ns/p").kind == "Pod"
    assert parse_object("queue root").event_namespace == "default"
    for bad in ("pod p", "queue ns/q", "thing ns/x", "pod", ""):
        with pytest.raises(ValueError):
            parse_object(bad)


async def test_many_different_messages_of_one_reason_are_combined_into_one_event(
    fake: FakeApiServer, recorder_factory: Callable[..., EventRecorder], clock: Clock
) -> None:
    recorder = recorder_factory(similar_limit=3, patch_interval=0.0)
    for placed in range(6):
        recorder.emit(
            obj="pod ns/p", kind="Warning", reason="FailedScheduling", message=f"waiting for gang: {placed} placed"
        )
        clock.now += 1
    assert await recorder.flush()
    messages = sorted(e["message"] for e in fake.events.values())
    assert len(messages) == 4, messages  # three of their own, then one combined
    combined = [e for e in fake.events.values() if e["message"].startswith("(combined from similar events): ")]
    assert len(combined) == 1
    await eventually(lambda: combined[0]["count"] == 3 and combined[0]["message"].endswith("5 placed"))
    # A message seen before the limit keeps counting up its own Event.
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message="waiting for gang: 0 placed")
    assert await recorder.flush()
    assert len(fake.events) == 4


async def test_the_writer_stops_when_cancelled_as_an_event_comes(fake: FakeApiServer, client: k8s.Client) -> None:
    # A stop (SIGTERM: the recorder's task cancelled) in the same moment as an Event, while a count waits for its
    # next write: the worker ends. Through asyncio.wait_for, Python 3.11 let the wake win over the cancel, and the
    # worker went on waiting for work.
    recorder = EventRecorder(client, settings=EventSettings(instance="gpusched-0", patch_interval=60.0))
    recorder.start()
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message="no node")
    assert await recorder.flush()
    recorder.emit(obj="pod ns/p", kind="Warning", reason="FailedScheduling", message="no node")
    for _ in range(5):
        await asyncio.sleep(0)  # the count is taken in; the worker waits up to its write, 60 s away
    worker = recorder._worker
    assert worker is not None and len(fake.events) == 1
    recorder.emit(obj="pod ns/q", kind="Warning", reason="FailedScheduling", message="no node")
    worker.cancel()
    done, _ = await asyncio.wait({worker}, timeout=5.0)
    assert worker in done and worker.cancelled()


def test_a_timestamp_keeps_its_whole_second_before_and_after_the_epoch() -> None:
    # metav1.Time has no fraction: the second it falls in, as datetime's strftime gave it (now made once a second).
    assert rfc3339(1_700_000_000.999) == rfc3339(1_700_000_000) == "2023-11-14T22:13:20Z"
    assert rfc3339(1_700_000_001.0) == "2023-11-14T22:13:21Z"
    assert rfc3339(-0.5) == "1969-12-31T23:59:59Z"
