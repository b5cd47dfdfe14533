"""Leader election on a Lease: one leader, a quick hand-over on shutdown, and a leader that stops at once."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest
import structlog.testing

from scheduler.k8s import client as k8s
from scheduler.k8s.config import LeaderElectionConfig
from scheduler.k8s.leader import EXPLAIN_URL_ANNOTATION, LeaderElector, LeaseThread
from tests.k8s.fakeapi import FakeApiServer, client_for, eventually

FAST = LeaderElectionConfig(lease_duration_s=1.0, renew_deadline_s=0.5, retry_period_s=0.05)
KEY = ("gpusched-system", "gpusched")


class Replica:
    """An elector and what it was told. ``clock`` is its own (a clock that stands still never sees a lease expire
    nor its own renew deadline pass); ``owned``, a client of its own, closed with it."""

    def __init__(
        self,
        client: k8s.Client,
        identity: str,
        config: LeaderElectionConfig = FAST,
        *,
        clock: Callable[[], float] = time.monotonic,
        owned: k8s.Client | None = None,
        explain_url: str = "",
    ) -> None:
        self.changes: list[bool] = []
        self.owned = owned
        self.elector = LeaderElector(
            client,
            namespace=KEY[0],
            name=KEY[1],
            identity=identity,
            config=config,
            on_change=self.changes.append,
            clock=clock,
            explain_url=explain_url,
        )
        self.task = asyncio.create_task(self.elector.run())

    @property
    def leading(self) -> bool:
        return bool(self.changes) and self.changes[-1]

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        if self.owned is not None:
            await self.owned.close()
            self.owned = None


def reads(fake: FakeApiServer, agent: str | None = None) -> int:
    """The reads of the Lease so far (by the client sending ``agent`` as its User-Agent, when given)."""
    return sum(1 for s in fake.requests("GET", f"/leases/{KEY[1]}") if agent is None or s.agent == agent)


@pytest.fixture
async def replicas(client: k8s.Client) -> AsyncIterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        await replica.stop()


async def test_one_leader_then_hand_over_on_shutdown(
    fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]
) -> None:
    a = Replica(client, "a")
    replicas.append(a)
    await eventually(lambda: a.leading)
    # b's clock stands still: a lease held by another never expires for b, which can lead only if it is handed over.
    own = client_for(fake.url, timeout=2.0, agent="b")
    b = Replica(own, "b", clock=lambda: 0.0, owned=own)
    replicas.append(b)
    await eventually(lambda: reads(fake, "b") >= 3)  # three reads of a's lease: three decisions to stay standby
    assert not b.leading and b.changes == []
    assert fake.leases[KEY]["spec"]["holderIdentity"] == "a"

    await a.stop()  # releases the lease: b takes it at its next retry, without waiting out the duration
    assert a.changes == [True, False]
    await eventually(lambda: b.leading)
    lease = fake.leases[KEY]["spec"]
    assert lease["holderIdentity"] == "b"
    assert lease["leaseTransitions"] == 1


async def test_standby_takes_over_a_leader_that_stopped_renewing(
    fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]
) -> None:
    # A holder that crashed: its lease is there, never renewed.
    fake.leases[KEY] = {
        "metadata": {"name": KEY[1], "namespace": KEY[0], "resourceVersion": "7"},
        "spec": {"holderIdentity": "crashed", "leaseDurationSeconds": 1, "renewTime": "2026-01-01T00:00:00.000000Z"},
    }
    now = [0.0]
    b = Replica(client, "b", clock=lambda: now[0])
    replicas.append(b)
    await eventually(lambda: reads(fake) >= 3)
    assert not b.leading  # a lease is honoured for its duration as observed here, whatever its renewTime says
    now[0] += 1.0  # the lease's duration, on b's clock, since b first saw it
    await eventually(lambda: b.leading)
    assert fake.leases[KEY]["spec"]["holderIdentity"] == "b"


async def test_leader_stops_at_once_when_another_holds_the_lease(
    fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]
) -> None:
    # a's clock stands still, so its renew deadline never passes: what stops it is the other holder it reads.
    a = Replica(client, "a", clock=lambda: 0.0)
    replicas.append(a)
    await eventually(lambda: a.leading)
    lease = fake.leases[KEY]
    lease["spec"]["holderIdentity"] = "usurper"
    lease["spec"]["renewTime"] = "2026-01-01T00:00:01.000000Z"
    await eventually(lambda: not a.leading)
    assert a.changes == [True, False]


async def test_leader_that_cannot_renew_stops_within_the_deadline(
    fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]
) -> None:
    now = [0.0]
    a = Replica(client, "a", clock=lambda: now[0])
    replicas.append(a)
    await eventually(lambda: a.leading)
    fake.leases_unreachable = True
    cut = reads(fake)
    await eventually(lambda: reads(fake) >= cut + 2)  # two renewals that got no answer
    assert a.leading  # within its renew deadline, on its clock
    # The renew deadline passes on a's clock, before the lease's duration would for the others: a stops.
    now[0] = FAST.renew_deadline_s
    assert FAST.renew_deadline_s < FAST.lease_duration_s
    await eventually(lambda: not a.leading)
    fake.leases_unreachable = False
    await eventually(lambda: a.leading)


async def test_the_lease_is_renewed_while_the_main_event_loop_is_held() -> None:
    # The API server on a loop of its own, so that holding the main loop holds only what runs on it (the
    # scheduling loop, in gpusched run). On the main loop, an elector would miss its renew deadline here.
    ready: asyncio.Queue[tuple[asyncio.AbstractEventLoop, FakeApiServer]] = asyncio.Queue()
    main = asyncio.get_running_loop()

    def serve() -> None:
        async def run() -> None:
            server = FakeApiServer()
            await server.start()
            stop = asyncio.Event()
            server.stop = stop  # type: ignore[attr-defined]
            main.call_soon_threadsafe(ready.put_nowait, (asyncio.get_running_loop(), server))
            await stop.wait()
            await server.close()

        asyncio.run(run())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    server_loop, server = await ready.get()
    changes: list[bool] = []
    lease = LeaseThread(
        lambda: _connect(server.url),
        namespace=KEY[0],
        name=KEY[1],
        identity="a",
        config=FAST,
        on_change=changes.append,
        loop=main,
    )
    lease.start()
    try:
        await eventually(lambda: changes == [True])
        before = len(server.requests("PUT", "/leases/gpusched"))
        time.sleep(4 * FAST.renew_deadline_s)  # the main loop held: a long batch of cycles, a big listing
        renewed = len(server.requests("PUT", "/leases/gpusched")) - before
        assert renewed > 0  # on the lease thread, while the main loop could run nothing
        assert lease.leading
        await asyncio.sleep(0)  # what the lease thread handed to the main loop during the hold runs now
        assert changes == [True]  # never lost
    finally:
        await lease.stop(5.0)
        server_loop.call_soon_threadsafe(server.stop.set)  # type: ignore[attr-defined]
        thread.join(5.0)
    assert changes == [True, False]
    assert server.leases[KEY]["spec"]["holderIdentity"] == ""  # released on stop


async def _connect(url: str) -> k8s.Client:
    return client_for(url, timeout=2.0)


async def test_a_missing_namespace_is_named_until_it_exists(
    fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]
) -> None:
    fake.missing_namespaces.add(KEY[0])
    with structlog.testing.capture_logs() as logs:
        a = Replica(client, "a")
        replicas.append(a)
        await eventually(lambda: bool(a.elector.refusal))
        assert a.elector.refusal.startswith(f"namespace {KEY[0]} does not exist")
        assert f"kubectl create namespace {KEY[0]}" in a.elector.refusal
        assert f'namespaces "{KEY[0]}" not found' in a.elector.refusal  # the API server's own words
        # Several retries: still refused, and said once.
        await eventually(lambda: sum(1 for r in fake.seen if r.method == "POST" and "leases" in r.path) >= 3)
    errors = [line for line in logs if line["log_level"] == "error"]
    assert [line["event"] for line in errors] == ["cannot lead"]
    assert errors[0]["reason"] == a.elector.refusal
    assert not a.leading

    fake.missing_namespaces.clear()  # created: the replica leads, and is no longer refused
    await eventually(lambda: a.leading)
    assert a.elector.refusal == ""


async def test_a_standby_hears_an_api_server_slower_than_its_retry_period(
    fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]
) -> None:
    # Every Lease request answered after 1.5 retry periods, as a loaded API server (or machine) answers: a standby
    # that gave up each attempt after one retry period never learnt why it was refused, nor took the lease once
    # it could (the missing-namespace test above failed that way under load).
    fake.lease_delay = 1.5 * FAST.retry_period_s
    fake.missing_namespaces.add(KEY[0])
    a = Replica(client, "a")
    replicas.append(a)
    await eventually(lambda: bool(a.elector.refusal))
    assert a.elector.refusal.startswith(f"namespace {KEY[0]} does not exist")
    fake.missing_namespaces.clear()
    await eventually(lambda: a.leading)
    assert a.elector.refusal == ""
    assert fake.leases[KEY]["spec"]["holderIdentity"] == "a"


async def test_a_conflict_is_not_a_refusal(fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]) -> None:
    a = Replica(client, "a")
    replicas.append(a)
    await eventually(lambda: a.leading)
    b = Replica(client, "b")
    replicas.append(b)
    await asyncio.sleep(0.3)
    assert b.elector.refusal == ""  # another holder: b could lead, it waits


async def test_the_leader_publishes_its_explain_address_on_the_lease(
    fake: FakeApiServer, client: k8s.Client, replicas: list[Replica]
) -> None:
    a = Replica(client, "a", explain_url="http://127.0.0.1:18081")
    replicas.append(a)
    await eventually(lambda: a.leading)
    assert fake.leases[KEY]["metadata"]["annotations"] == {EXPLAIN_URL_ANNOTATION: "http://127.0.0.1:18081"}
    await a.stop()
    b = Replica(client, "b", explain_url="http://10.0.0.9:8081")
    replicas.append(b)
    await eventually(lambda: b.leading)
    assert fake.leases[KEY]["metadata"]["annotations"] == {EXPLAIN_URL_ANNOTATION: "http://10.0.0.9:8081"}
