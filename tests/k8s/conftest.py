from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s.operator import Operator
from tests.k8s.fakeapi import FakeApiServer, client_for


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def client(fake: FakeApiServer) -> AsyncIterator[k8s.Client]:
    c = client_for(fake.url, timeout=2.0)
    yield c
    await c.close()


@pytest.fixture
async def operator(client: k8s.Client) -> AsyncIterator[Operator]:
    """An operator with the default config on the fake API server, its scheduling task running."""
    op = Operator(client, k8s_config.parse({}), identity="test")
    await op.start()
    task = asyncio.create_task(op.run())
    yield op
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await op.close()


@pytest.fixture
async def leader(client: k8s.Client) -> AsyncIterator[Operator]:
    """An operator with the default config that leads, its scheduling task not running (the test drives the loop)."""
    op = Operator(client, k8s_config.parse({}), identity="leader-0")
    await op.start()
    op.set_leading(True)
    yield op
    await op.close()
