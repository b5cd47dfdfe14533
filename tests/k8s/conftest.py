from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from scheduler.k8s import client as k8s
from tests.k8s.fakeapi import FakeApiServer


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def client(fake: FakeApiServer) -> AsyncIterator[k8s.Client]:
    c = k8s.for_host(fake.url, timeout=2.0)
    yield c
    await c.close()
