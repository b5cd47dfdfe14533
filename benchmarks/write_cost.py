"""The client's CPU for each write of a pod bound: aiohttp's session against gpusched's own connections.

Every pod bound costs two POSTs, its binding and its ``Scheduled`` Event (``scheduler.k8s.client.DIRECT``). This
script serves POSTs on loopback over TLS from a child process (aiohttp's server, answering each with an Event as the
API server does) and sends ``--requests`` Event-sized POSTs, ``--in-flight`` at a time, from this process:

- ``aiohttp``: through an aiohttp session as kubernetes_asyncio's REST client opens it, as gpusched sent them before
  ``scheduler.k8s.http1`` (and still does where a proxy is set): the same headers, body, timeout and answer read;
- ``http1``: through :class:`scheduler.k8s.http1.Pool`, as gpusched sends them now.

The two take turns ``--rounds`` times after a warm-up each, and the script prints this process's CPU per request
(``time.process_time``: the client's alone, the server being another process) and the requests a second, per round
and as medians. Only the client's side differs; the answers are the same bytes.

Run: ``.venv/bin/python -m benchmarks.write_cost [--requests 6000] [--in-flight 64] [--rounds 3]`` (needs the
``dev`` extra's ``cryptography`` for the server's certificate).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson

from scheduler.k8s import http1

#: An Event as gpusched writes it for a pod bound (``scheduler.k8s.ports.events``), and the API server's answer.
EVENT = {
    "apiVersion": "events.k8s.io/v1",
    "kind": "Event",
    "metadata": {"name": "bench-01234.18a2b3c4d5e6f708", "namespace": "bench"},
    "eventTime": "2026-12-07T10:00:00.000000Z",
    "reportingController": "gpusched",
    "reportingInstance": "gpusched-7d9f8b6c5-x2x4z",
    "action": "Binding",
    "reason": "Scheduled",
    "regarding": {"kind": "Pod", "namespace": "bench", "name": "bench-01234", "uid": "5f1c1a2e-1111-2222-3333"},
    "note": "Successfully assigned bench/bench-01234 to node-0042",
    "type": "Normal",
}
ANSWER = orjson.dumps(
    {**EVENT, "metadata": {**EVENT["metadata"], "uid": "a" * 36, "resourceVersion": "123456"}, "series": None}
)
PATH = "/apis/events.k8s.io/v1/namespaces/bench/events"
#: The headers of gpusched's writes: its User-Agent, JSON both ways, a bearer token of a service account's size.
HEADERS = {
    "User-Agent": "gpusched",
    "Accept": "application/json",
    "Content-Type": "application/json",
    "Authorization": "Bearer " + "t" * 900,
}

SERVER = """
import asyncio, ssl, sys
from aiohttp import web
answer = open(sys.argv[3], "rb").read()
async def handle(request):
    await request.read()
    return web.Response(body=answer, status=201, content_type="application/json")
app = web.Application()
app.router.add_post("/{tail:.*}", handle)
tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
tls.load_cert_chain(sys.argv[1], sys.argv[2])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[4]), ssl_context=tls, print=lambda *_: print("up", flush=True),
            access_log=None)
"""


def certificate(directory: Path, name: str = "server") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA), and its key: ``directory/NAME.crt`` and ``.key``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


Send = Callable[[], Awaitable[int]]


async def timed(send: Send, requests: int, in_flight: int) -> tuple[float, float]:
    """CPU seconds of this process and wall seconds for ``requests`` sends, ``in_flight`` at a time."""
    slots = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with slots:
            status = await send()
            if status != 201:
                raise RuntimeError(f"the server answered {status}")

    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*(one() for _ in range(requests)))
    return time.process_time() - cpu, time.monotonic() - wall


async def measure(url: str, ca: Path, *, requests: int, in_flight: int, rounds: int) -> dict[str, list[float]]:
    tls = http1.tls_of(_Conf(str(ca)))
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight + 16, ssl=tls), trust_env=False)
    pool = http1.Pool(url, tls=tls)
    timeout = aiohttp.ClientTimeout(total=10.0)

    async def via_aiohttp() -> int:
        response = await session.request("POST", url + PATH, headers=HEADERS, data=orjson.dumps(EVENT), timeout=timeout)
        async with response:
            orjson.loads(await response.read())
            return int(response.status)

    async def via_http1() -> int:
        reply = await pool.request("POST", PATH, headers=HEADERS, body=orjson.dumps(EVENT))
        orjson.loads(reply.body)
        return reply.status

    paths: dict[str, Send] = {"aiohttp": via_aiohttp, "http1": via_http1}
    found: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for send in paths.values():
            await timed(send, min(requests, 500), in_flight)  # connections opened, code warm
        for turn in range(rounds):
            for name, send in paths.items():
                cpu, wall = await timed(send, requests, in_flight)
                found[name].append(cpu / requests)
                print(
                    f"round {turn + 1} {name:8s} {1e6 * cpu / requests:6.0f} us of CPU a request, "
                    f"{requests / wall:6.0f} requests/s",
                    flush=True,
                )
    finally:
        await session.close()
        pool.close()
    return found


class _Conf:
    """The Configuration fields ``http1.tls_of`` reads: the server's CA, nothing else."""

    def __init__(self, ca: str) -> None:
        self.ssl_ca_cert = ca
        self.cert_file = None
        self.key_file = None
        self.verify_ssl = True
        self.disable_strict_ssl_verification = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18443)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = certificate(Path(tmp))
        answer = Path(tmp) / "answer.json"
        answer.write_bytes(ANSWER)
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(cert), str(key), str(answer), str(args.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            if server.stdout.readline().strip() != "up":
                raise SystemExit("the server did not start")
            found = asyncio.run(
                measure(
                    f"https://127.0.0.1:{args.port}",
                    cert,
                    requests=args.requests,
                    in_flight=args.in_flight,
                    rounds=args.rounds,
                )
            )
        finally:
            server.terminate()
            server.wait()
    print("| client | us of CPU a request (median) | rounds |")
    print("|---|---:|---|")
    for name, values in found.items():
        rounds = ", ".join(f"{1e6 * v:.0f}" for v in values)
        print(f"| {name} | {1e6 * statistics.median(values):.0f} | {rounds} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
