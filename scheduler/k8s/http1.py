"""Kept-alive HTTP/1.1 connections to the API server for the two writes of every pod bound.

Each pod bound costs two requests, its binding and its ``Scheduled`` Event (``scheduler.k8s.client.DIRECT``), the
same small JSON POST every time. aiohttp's client spent about 0.4 ms of CPU on each here (its request and response
objects, the connector's bookkeeping, its timers), against 0.15 to 0.19 ms for the same request framed here and its
answer parsed by httptools (llhttp, Node.js's parser), TLS included (docs/performance.md, "The hot writes' own
connections"). These requests go through :class:`Pool`; every other request (listings, watches, patches) stays with
aiohttp.

What a :class:`Pool` does not do, so that the client keeps such a server on aiohttp (``scheduler.k8s.client``): a
proxy (set in the kubeconfig, or in the environment where aiohttp would look it up). Nor redirects, which the API
server does not send for these requests. It asks for no compressed answer.

The invariants: a connection carries one request at a time (no pipelining) and goes back to the pool only after
its whole answer was read and the server keeps it open; a request that was cancelled, timed out or failed closes
its connection, so no later request ever reads an earlier one's answer. A connection idle for :data:`KEEPALIVE_S`
is closed rather than reused, before a server's own idle timeout could close it under a request.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httptools

#: Seconds a connection may wait idle in the pool and still be used (aiohttp's default keep-alive, 15 s).
KEEPALIVE_S = 15.0


class ConnectionLost(ConnectionError):
    """The connection closed, or the server sent what is not an HTTP/1.1 answer, before the whole answer came."""


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer: its status, its body as sent, and its ``Retry-After`` header (empty when none)."""

    status: int
    body: bytes
    retry_after: str = ""


class _Connection(asyncio.Protocol):
    """One connection: sends a request, and parses the answer as it arrives."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._answer: asyncio.Future[Reply] | None = None
        self._body: list[bytes] = []
        self._retry_after = ""
        #: Open and reusable: False from the moment it closes, fails, or the server says it will close it.
        self.open = False
        #: When it went back to the pool (monotonic seconds).
        self.idle_since = 0.0

    # asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.open = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._fail(ConnectionLost(f"the connection closed before the answer: {exc}" if exc else "server disconnected"))

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionLost(f"not an HTTP/1.1 answer: {exc}"))
            self.close()

    # httptools' side (each header comes whole)
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self._retry_after = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        reply = Reply(int(self._parser.get_status_code()), b"".join(self._body), self._retry_after)
        self._body = []
        self._retry_after = ""
        answer, self._answer = self._answer, None
        if answer is None or not self._parser.should_keep_alive():
            self.close()  # an answer nobody asked for, or the server's last on this connection
        if answer is not None and not answer.done():
            answer.set_result(reply)

    # the pool's side
    async def exchange(self, request: bytes) -> Reply:
        assert self._transport is not None and self._answer is None
        self._answer = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return await self._answer

    def close(self) -> None:
        self.open = False
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: Exception) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)


class Pool:
    """Connections to one server (``url``: scheme, host, port, and a path prefix if any), reused one request at a
    time; see the module's notes."""

    def __init__(self, url: str, *, tls: ssl.SSLContext | None = None, server_hostname: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http or https URL of a host")
        self._secure = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._secure else 80)
        self._tls = (tls or ssl.create_default_context()) if self._secure else None
        self._server_hostname = (server_hostname or self._host) if self._secure else None
        self._prefix = parts.path.rstrip("/")
        named = f"[{self._host}]" if ":" in self._host else self._host
        self._authority = named if parts.port is None else f"{named}:{self._port}"
        self._idle: collections.deque[_Connection] = collections.deque()
        self._all: set[_Connection] = set()
        #: Connections opened so far (each a TCP connection and, on https, a TLS handshake).
        self.opened = 0

    @property
    def connections(self) -> int:
        """Connections open now, idle or carrying a request."""
        return len(self._all)

    async def request(self, verb: str, path: str, *, headers: Mapping[str, str], body: bytes) -> Reply:
        """Send one request (``path`` quoted already, below the URL's prefix) and read its whole answer.

        Raises :class:`ConnectionLost` or another ``OSError`` when no whole answer came, and ``ValueError`` for a
        header that would break the request's framing (a line break in a name or value)."""
        head = [f"{verb} {self._prefix}{path} HTTP/1.1\r\nHost: {self._authority}\r\n"]
        for name, value in headers.items():
            if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
                raise ValueError(f"header {name!r} cannot be sent: a line break or a colon in its name or value")
            head.append(f"{name}: {value}\r\n")
        head.append(f"Content-Length: {len(body)}\r\n\r\n")
        connection = await self._connection()
        try:
            reply = await connection.exchange("".join(head).encode() + body)
        except BaseException:
            self._drop(connection)
            raise
        if connection.open:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            self._all.discard(connection)
        return reply

    async def _connection(self) -> _Connection:
        """The connection used last, if it is open and was not idle too long; else a new one."""
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.open and now - connection.idle_since < KEEPALIVE_S:
                # The oldest idle ones are past their keep-alive too when this one is close to it: close them.
                while self._idle and now - self._idle[0].idle_since >= KEEPALIVE_S:
                    self._drop(self._idle.popleft())
                return connection
            self._drop(connection)
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            _Connection, self._host, self._port, ssl=self._tls, server_hostname=self._server_hostname
        )
        self.opened += 1
        self._all.add(connection)
        return connection

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._all.discard(connection)

    @classmethod
    def of(cls, configuration: Any, *, server_hostname: str | None = None) -> Pool:
        """A pool to the server of a kubernetes_asyncio ``Configuration``, with the TLS it asks for (:func:`tls_of`)."""
        secure = urllib.parse.urlsplit(configuration.host).scheme == "https"
        return cls(configuration.host, tls=tls_of(configuration) if secure else None, server_hostname=server_hostname)

    def close(self) -> None:
        """Close every connection, idle or carrying a request (which then fails with :class:`ConnectionLost`)."""
        for connection in list(self._all):
            connection.close()
        self._all.clear()
        self._idle.clear()


def tls_of(configuration: Any) -> ssl.SSLContext:
    """The TLS context a kubernetes_asyncio ``Configuration`` asks for: its CA (else the system's), its client
    certificate, and verification off only where it says so; what its own REST client builds from the same fields."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
