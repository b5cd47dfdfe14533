"""`gpusched run` ends promptly in every state, says why when it cannot start, and exits non-zero on a crash."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scheduler import cli
from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s import run
from scheduler.k8s.config import LeaderElectionConfig
from scheduler.k8s.operator import Operator
from tests.k8s.fakeapi import FakeApiServer, client_for, eventually
from tests.k8s.test_operator import settled

FAST = LeaderElectionConfig(lease_duration_s=30.0, renew_deadline_s=0.5, retry_period_s=0.05)
LEASE = ("gpusched-system", "gpusched")
GPUSCHED = Path(sys.executable).parent / "gpusched"


class QuietFakeApi(FakeApiServer):
    """Node watches that stay open (the base server answers a watch with a listing, which ends it at once)."""

    async def _list_nodes(self, request: web.Request) -> web.StreamResponse:  # type: ignore[override]  # a stream
        if request.query.get("watch") not in ("true", "1", "True"):
            return web.json_response({"items": self.nodes, "metadata": {"resourceVersion": "1"}})
        response = web.StreamResponse()
        await response.prepare(request)
        await self._release.wait()
        return response


@pytest.fixture
async def quiet() -> Any:
    server = QuietFakeApi()
    await server.start()
    yield server
    await server.close()


def arguments(**extra: Any) -> argparse.Namespace:
    """``gpusched run``'s arguments: its parser's defaults (so a new option is never missing here), then these."""
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    values: dict[str, Any] = vars(parser.parse_args([]))
    values |= {
        "namespace": LEASE[0],
        "lease_name": LEASE[1],
        "identity": "me",
        "metrics_port": 0,
        "health_port": 0,
        "log_format": "console",
    }
    values.update(extra)
    return argparse.Namespace(**values)


class Started:
    """Catches the Operator that serve() makes, and swaps in fakes for the connection and the warm-up."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, url: str, *, warm_up: Any = None) -> None:
        self.operators: list[Operator] = []
        started = self

        class Caught(Operator):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                started.operators.append(self)

        async def connect(settings: k8s.ClientSettings) -> k8s.Client:
            return client_for(url, timeout=2.0)

        monkeypatch.setattr(run, "Operator", Caught)
        monkeypatch.setattr(k8s, "connect", connect)
        monkeypatch.setattr(run, "warm_kernels", warm_up or (lambda config: 2))


async def standby(quiet: QuietFakeApi, started: Started) -> None:
    """Until the replica has read the other holder's lease a few times (each read is a decision to stay standby)
    and its scheduling task has taken its last wake-up."""
    await eventually(lambda: len(quiet.requests("GET", f"/leases/{LEASE[1]}")) >= 3)
    (operator,) = started.operators
    assert not operator.leading
    await settled(operator)


def config() -> k8s_config.OperatorConfig:
    return dataclasses.replace(k8s_config.parse({}), leader_election=FAST)


async def test_a_standby_stops_soon_after_the_stop_signal(quiet: QuietFakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another replica holds the lease (and keeps it for the test): this one stays standby.
    quiet.leases[LEASE] = {
        "metadata": {"name": LEASE[1], "namespace": LEASE[0], "resourceVersion": "7"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 300, "renewTime": "2026-01-01T00:00:00Z"},
    }
    started = Started(monkeypatch, quiet.url)
    stop = asyncio.Event()
    serving = asyncio.create_task(run.serve(arguments(), config(), stop=stop))
    await eventually(lambda: bool(started.operators))
    await eventually(lambda: "nodes" in _listed(started))
    await standby(quiet, started)
    stop.set()
    # Before the fix serve() waited forever on the scheduling task, whose cancel asyncio.wait_for had swallowed
    # (the lease it waits for is held for 300 s: only a hang would reach the guard's 15 s).
    status = await asyncio.wait_for(serving, timeout=15)
    assert status == 0
    assert quiet.leases[LEASE]["spec"]["holderIdentity"] == "other"


async def test_a_standby_whose_scheduling_task_loses_a_cancel_still_stops(
    quiet: QuietFakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What Operator.run does when asyncio.wait_for (Python 3.11) returns instead of raising: the cancel arrived in
    # the loop iteration where set_leading(False) had just set the event it waits on. Before the fix serve()
    # awaited that task forever, and a standby never exited on SIGTERM.
    real_run = Operator.run

    async def loses_a_cancel(self: Operator) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await real_run(self)
        await real_run(self)

    monkeypatch.setattr(Operator, "run", loses_a_cancel)
    quiet.leases[LEASE] = {
        "metadata": {"name": LEASE[1], "namespace": LEASE[0], "resourceVersion": "7"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 300, "renewTime": "2026-01-01T00:00:00Z"},
    }
    started = Started(monkeypatch, quiet.url)
    stop = asyncio.Event()
    serving = asyncio.create_task(run.serve(arguments(), config(), stop=stop))
    await eventually(lambda: "nodes" in _listed(started))
    await standby(quiet, started)
    stop.set()
    assert await asyncio.wait_for(serving, timeout=15) == 0


async def test_ending_a_task_is_bounded_even_when_it_ignores_cancels() -> None:
    async def loses_one_cancel() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        await asyncio.sleep(3600)

    task = asyncio.create_task(loses_one_cancel())
    await asyncio.sleep(0)
    assert await run._end(task, grace=0.05)  # cancelled again after the grace
    assert task.cancelled()

    ignoring = True
    swallowed = 0

    async def ignores_cancels() -> None:
        nonlocal swallowed
        while ignoring:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1

    task = asyncio.create_task(ignores_cancels())
    await asyncio.sleep(0)
    # Left behind after the limit, not awaited forever (the guard is far above the 0.3 s limit).
    assert not await asyncio.wait_for(run._end(task, grace=0.05, limit=0.3), timeout=15)
    assert swallowed >= 2 and not task.done()  # cancelled again after the grace, and still running
    ignoring = False
    task.cancel()
    await asyncio.wait({task}, timeout=1)


async def test_a_leader_releases_the_lease_and_stops(quiet: QuietFakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    started = Started(monkeypatch, quiet.url)
    stop = asyncio.Event()
    # The command line's restore of the collector's full passes (scheduler/cli.py) is called once, and only once
    # the kernels are warm and what the imports made is frozen, before the operator is made.
    restored: list[tuple[int, int]] = []
    args = arguments(restore_collector=lambda: restored.append((gc.get_freeze_count(), len(started.operators))))
    gc.unfreeze()
    serving = asyncio.create_task(run.serve(args, config(), stop=stop))
    await eventually(lambda: bool(started.operators) and started.operators[0].leading)
    assert len(restored) == 1 and restored[0][0] > 0 and restored[0][1] == 0
    stop.set()
    assert await asyncio.wait_for(serving, timeout=15) == 0
    assert quiet.leases[LEASE]["spec"]["holderIdentity"] == ""  # handed over, not left to expire
    assert gc.isenabled()  # off at most while the first listings came in


async def test_the_collector_is_off_only_while_the_first_listings_come_in() -> None:
    listings = [asyncio.Event(), asyncio.Event()]
    frozen = gc.get_freeze_count()
    task = asyncio.create_task(run._listing_uncollected(listings, limit=3600))
    await asyncio.sleep(0)
    assert not gc.isenabled()
    listings[0].set()
    await asyncio.sleep(0)
    assert not gc.isenabled()  # until the last one is in
    made = [{"a pod's record": i} for i in range(100)]
    listings[1].set()
    await asyncio.wait_for(task, timeout=15)
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)  # what the listings made is frozen, as the imports are

    # Stopped while listing, or a listing that never ends: the collector comes back all the same.
    task = asyncio.create_task(run._listing_uncollected([asyncio.Event()], limit=3600))
    await asyncio.sleep(0)
    assert not gc.isenabled()
    assert await run._end(task)
    assert gc.isenabled()
    await asyncio.wait_for(run._listing_uncollected([asyncio.Event()], limit=0.05), timeout=15)
    assert gc.isenabled()

    # Whoever turned it off keeps it off.
    gc.disable()
    try:
        await asyncio.wait_for(run._listing_uncollected([asyncio.Event()], limit=3600), timeout=15)
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_a_stop_during_the_warm_up_does_not_wait_for_it(
    quiet: QuietFakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiling = threading.Event()

    def slow_warm_up(config: k8s_config.OperatorConfig) -> int:
        compiling.set()
        time.sleep(30)  # a cold numba cache
        return 2

    started = Started(monkeypatch, quiet.url, warm_up=slow_warm_up)
    stop = asyncio.Event()
    serving = asyncio.create_task(run.serve(arguments(), config(), stop=stop))
    await eventually(compiling.is_set)
    stop.set()
    assert await asyncio.wait_for(serving, timeout=5) == 0
    assert started.operators == []


async def test_a_task_that_fails_stops_everything_and_exits_non_zero(
    quiet: QuietFakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = Started(monkeypatch, quiet.url)

    async def crash(self: Operator) -> None:
        await eventually(lambda: self.leading)  # so that the shutdown has a lease to hand over
        raise ValueError("demand of queue prod for nvidia.com/gpu is -3.55e-15, not a number >= 0")

    monkeypatch.setattr(Operator, "run", crash)
    before = {task for task in asyncio.all_tasks()}
    status = await asyncio.wait_for(run.serve(arguments(), config(), stop=asyncio.Event()), timeout=15)
    assert status == run.EXIT_FAILED
    assert started.operators and not started.operators[0].leading
    assert quiet.leases[LEASE]["spec"]["holderIdentity"] == ""  # the same orderly shutdown: the lease handed over
    left = [task.get_name() for task in asyncio.all_tasks() - before if not task.done()]
    assert [name for name in left if name.startswith("gpusched")] == []


def test_main_exits_non_zero_when_a_task_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    Started(monkeypatch, "http://127.0.0.1:1")

    async def crash(self: Operator) -> None:
        raise RuntimeError("a what-if on the previous snapshot is still open")

    monkeypatch.setattr(Operator, "run", crash)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert run.main(arguments()) == run.EXIT_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return path


def test_run_against_an_unreachable_api_server_ends_on_sigterm(tmp_path: Path) -> None:
    config_file = kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    command = [str(GPUSCHED), "run", "--kubeconfig", str(config_file), "--metrics-port", "0", "--health-port", "0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines: list[str] = []
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 120  # a cold kernel warm-up takes 20-40 s
        for line in process.stderr:
            lines.append(line)
            # Retrying: the listings or the lease found nobody at 127.0.0.1:1.
            if "Cannot connect" in line or "Connect call failed" in line or time.monotonic() > deadline:
                break
        assert process.poll() is None, "".join(lines)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # a second signal must not raise
        # It ends on its own (the guard only stops a hang: the retries it was in would go on forever).
        rest = process.communicate(timeout=20)[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = "".join(lines) + rest
    assert process.returncode == 0, text
    assert "Traceback" not in text and "InvalidStateError" not in text


def test_run_with_a_missing_kubeconfig_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def never(config: k8s_config.OperatorConfig) -> int:
        raise AssertionError("the kubeconfig is checked before the warm-up")

    monkeypatch.setattr(run, "warm_kernels", never)
    missing = tmp_path / "nope" / "kubeconfig"
    status = cli.main(["run", "--kubeconfig", str(missing), "--metrics-port", "0", "--health-port", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[-1] == f"gpusched: kubeconfig {missing}: no such file"
    assert not any("Traceback" in line for line in err)


def test_explain_with_a_missing_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "kubeconfig"
    status = cli.main(["explain", "some-pod", "--kubeconfig", str(missing)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == [f"gpusched: kubeconfig {missing}: no such file"]


def test_explain_with_a_kubeconfig_that_is_not_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "kubeconfig"
    empty.write_text("")
    status = cli.main(["explain", "some-pod", "--kubeconfig", str(empty)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith(f"gpusched: kubeconfig {empty}: ")


def _listed(started: Started) -> set[str]:
    return set(started.operators[0].feed._listed) if started.operators else set()
