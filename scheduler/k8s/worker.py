"""The shape the API writers share: a background task that drains work, writes in flight as tasks, and a
flush that waits until everything queued is written (for shutdown, hand-over and tests)."""

from __future__ import annotations

import asyncio
import contextlib
import time


class BackgroundWriter:
    """Subclasses set ``_worker`` (the draining task), ``_tasks`` (writes in flight) and ``_wake``, and say
    when nothing is left with :meth:`_idle`. While ``_force`` is set, the worker writes at once."""

    _worker: asyncio.Task[None] | None
    _tasks: set[asyncio.Task[None]]
    _wake: asyncio.Event
    _force: bool

    def _idle(self) -> bool:
        raise NotImplementedError

    async def flush(self, timeout: float = 10.0) -> bool:
        """Write everything waiting now, ignoring intervals; False if not done in ``timeout`` seconds."""
        self._force = True
        self._wake.set()
        try:
            deadline = time.monotonic() + timeout
            while not self._idle():
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.005)
            return True
        finally:
            self._force = False

    async def close(self, timeout: float = 5.0) -> None:
        """Flush, then stop the worker and any write still running."""
        await self.flush(timeout)
        tasks = [t for t in (self._worker, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._worker = None
