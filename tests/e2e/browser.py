"""Headless Chromium driven over the DevTools protocol (CDP), for the dashboard's browser tests.

The browser is Debian's chromium-headless-shell (tests/e2e/build-chromium.sh, ``GPUSCHED_CHROMIUM``); the protocol
is spoken over aiohttp's WebSocket client (already a dependency), on an event loop of its own thread, so that the
tests stay plain synchronous code like the rest of the suite. No Playwright: four CDP methods are all it takes
(Page.navigate, Runtime.evaluate, Page.captureScreenshot, and the load event).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from tests.e2e.skips import made_by

T = TypeVar("T")
HERE = Path(__file__).resolve().parent


def chromium() -> Path:
    """The browser: ``GPUSCHED_CHROMIUM``, else what build-chromium.sh fetches (the test skips without it, or
    fails under GPUSCHED_E2E_REQUIRED=1)."""
    given = os.environ.get("GPUSCHED_CHROMIUM", "")
    if given and Path(given).exists():
        return Path(given)
    return made_by(HERE / "build-chromium.sh", failed="could not fetch Debian's chromium-headless-shell", timeout=600)


class Browser:
    """One headless browser with one page."""

    def __init__(self, binary: Path, *, width: int = 1400, height: int = 900) -> None:
        self._profile = tempfile.mkdtemp(prefix="gpusched-chromium-")
        self._process = subprocess.Popen(
            [
                str(binary),
                "--headless",
                "--no-sandbox",  # root in CI; the pages are our own
                "--disable-gpu",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cdp", daemon=True)
        self._thread.start()
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._events: list[str] = []
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        try:
            self._run(self._connect())
        except BaseException:
            self.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _connect(self) -> None:
        active = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not active.exists() or len(active.read_text().splitlines()) < 2:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start (no DevToolsActivePort)")
            await asyncio.sleep(0.1)
        port = int(active.read_text().splitlines()[0])
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as listing:
            targets = await listing.json()
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._loop.create_task(self._read())
        await self._call("Page.enable")
        await self._call("Runtime.enable")

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._waiting.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif data.get("method"):
                self._events.append(data["method"])

    async def _call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._ws is not None
        ident = next(self._ids)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._waiting[ident] = future
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        answer: dict[str, Any] = await asyncio.wait_for(future, 60)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return dict(answer.get("result") or {})

    def goto(self, url: str, timeout: float = 30.0) -> float:
        """Open ``url`` and wait for its load event; the seconds it took."""
        started = time.monotonic()
        self._events.clear()
        self._run(self._call("Page.navigate", url=url))
        self.wait_for(lambda: "Page.loadEventFired" in self._events, timeout=timeout, what=f"{url} loaded")
        return time.monotonic() - started

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self._run(self._call("Runtime.evaluate", expression=expression, returnByValue=True))
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, check: Callable[[], Any], *, timeout: float, what: str, every: float = 0.05) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(every)

    def wait_js(self, expression: str, *, timeout: float = 10.0) -> Any:
        return self.wait_for(lambda: self.evaluate(expression), timeout=timeout, what=expression)

    def screenshot(self, path: Path) -> Path:
        shot = self._run(self._call("Page.captureScreenshot", format="png", captureBeyondViewport=True))
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        async def closing() -> None:
            if self._ws is not None:
                await self._ws.close()
            if self._session is not None:
                await self._session.close()

        try:
            if self._loop.is_running():
                self._run(closing(), timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)
            shutil.rmtree(self._profile, ignore_errors=True)
