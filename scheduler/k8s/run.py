"""``gpusched run``: the operator process. Connects, serves health and metrics, elects a leader, watches, schedules.

Tasks on one event loop: the pod and node informers and kopf's watches (feeding :class:`Operator`), the
scheduling task, the leader elector, the writers (binder, Events, status) and the two HTTP servers. SIGTERM or
SIGINT stops them in an order that hands over quickly: stop scheduling, release the lease, stop the watches,
finish bindings already sent. Invariants kept here:

- The process ends within seconds of SIGTERM or SIGINT in every state: while the kernels compile, while the API
  server does not answer, as leader or standby. No task is awaited without a bound (:func:`_end`): a task that
  does not end after being cancelled, again and again, is left behind with an error in the log. A second
  signal only says that the process is already stopping.
- A task that fails (or ends) on its own stops the process the same orderly way, and the exit status is then
  1, so that Kubernetes restarts the replica and the failure shows; a stop by signal exits 0.
- A kubeconfig that cannot be used is reported in one line (``InvalidObject``) before the ~20 s of kernel
  warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

from scheduler.api.objects import pod as api_pod
from scheduler.k8s import client as k8s_client
from scheduler.k8s import config as k8s_config
from scheduler.k8s import logs
from scheduler.k8s.feeds import discovery, handlers, informer, numa_zones
from scheduler.k8s.leader import RELEASE_TIMEOUT_S, LeaseThread
from scheduler.k8s.operator import Operator, warm_kernels
from scheduler.k8s.ports import device_claims, volume_binding
from scheduler.k8s.serve import dashboard_options, health
from scheduler.kernels import loading as kernel_loading

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: Exit status when a task failed (a signal's stop is 0; a user error is 2, from the command line).
EXIT_FAILED = 1
#: Seconds a cancelled task gets before it is cancelled again (a cancel can be lost, see :func:`_end`).
CANCEL_GRACE_S = 0.5
#: Seconds after which a task that still has not ended is left behind.
CANCEL_LIMIT_S = 3.0
#: Seconds kopf gets to stop on its stop flag (it waits up to 5 s for its handlers) before it is cancelled.
WATCHES_STOP_S = 7.0
#: Seconds bindings already sent and the writers get to finish.
DRAIN_S = 10.0
#: The lease thread's own client: a read and an update per retry period need little, and never wait for bindings.
LEASE_QPS = 20.0
LEASE_BURST = 40
#: Seconds the event loop's leftovers get after :func:`serve` returns.
LEFTOVER_S = 1.0
#: Seconds at most the collector stays off while the first listings come in (see :func:`_listing_uncollected`).
LISTING_UNCOLLECTED_S = 300.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="a kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
    parser.add_argument("--context", help="a context of the kubeconfig (default: its current context)")
    parser.add_argument("--config", help="the scheduler's YAML config file (see docs/operator.md)")
    parser.add_argument(
        "--namespace", default="gpusched-system", help="where the leader-election Lease lives (must exist)"
    )
    parser.add_argument("--lease-name", default="gpusched", help="the coordination.k8s.io Lease name")
    parser.add_argument(
        "--scheduler-name",
        default=api_pod.SCHEDULER_NAME,
        type=_scheduler_name,
        help="the spec.schedulerName of the pods to schedule (default: %(default)s; default-scheduler makes gpusched "
        "the cluster's scheduler for every pod that names none: stop kube-scheduler first, see docs/operator.md)",
    )
    parser.add_argument("--identity", help="this replica's name in the Lease (default: hostname-pid)")
    parser.add_argument("--metrics-port", type=int, default=8080, help="/metrics port (0: pick a free one)")
    parser.add_argument(
        "--health-port", type=int, default=8081, help="/healthz, /readyz, /leader, /explain (0: pick one)"
    )
    parser.add_argument(
        "--bind-address",
        default="0.0.0.0",
        help="the address the health and metrics servers listen on (127.0.0.1: this host only; :: for IPv6)",
    )
    parser.add_argument(
        "--advertise-address",
        help="the address the leader publishes on its Lease for gpusched explain (default: --bind-address, or the "
        "loopback address when that is all interfaces: right for gpusched run on the machine explain runs on)",
    )
    parser.add_argument("--log-format", choices=("auto", "json", "console"), default="auto")
    dashboard_options.add_arguments(parser, default_port=None)


def _scheduler_name(value: str) -> str:
    if not value.strip() or value != value.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not a scheduler name (a pod's spec.schedulerName)")
    return value


def main(args: argparse.Namespace) -> int:
    # From here to the end of the process, SIGTERM and SIGINT stop it in order, never abruptly: before serve()
    # takes them over the signal is remembered (serve() then stops at once), after it lets go (while the event
    # loop closes) a signal only says that the process is already stopping.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _remember_signal)
    try:
        logs.configure(args.log_format)
        config = k8s_config.load(args.config)  # bad config: InvalidObject, reported by the CLI before any I/O
        dashboard_options.check_arguments(args)
        return _run_bounded(serve(args, config))
    finally:
        # The interpreter's own exit puts the default handlers back (a signal would then end the process with
        # -15 instead of its status) but keeps ignored ones ignored; all that is left to do is bounded.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)


#: Signals received while serve() did not handle them (see :func:`main`).
_signalled: list[int] = []


def _remember_signal(signum: int, _: object) -> None:
    if _signalled:
        log.info("already stopping", signal=signal.Signals(signum).name)
    _signalled.append(signum)


def _run_bounded(main_coro: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run`` without its unbounded end: asyncio.run cancels the tasks left over once and then waits for
    them without limit, so one task that swallows its cancel would keep the process alive forever."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main_coro)
    finally:
        try:
            leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.wait(leftovers, timeout=LEFTOVER_S))
            loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), LEFTOVER_S))
        except (TimeoutError, RuntimeError):
            pass
        finally:
            loop.close()


def client_settings(args: argparse.Namespace, config: k8s_config.OperatorConfig) -> k8s_client.ClientSettings:
    return k8s_client.ClientSettings(
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        context=args.context,
        qps=config.binding.qps,
        burst=config.binding.burst,
        timeout=config.binding.timeout_s,
        connections=config.binding.concurrency + 16,
    )


class _Signals:
    """SIGTERM and SIGINT set ``stop``; a second signal only says so. ``install()`` may be called again after
    someone else (kopf) put handlers of their own on the loop."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.loop = asyncio.get_running_loop()
        #: The handlers found at the first install, put back by remove() (asyncio would put the default back,
        #: and a default SIGTERM ends a process at once, stopping or not).
        self.previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread receives signals
        for sig in (signal.SIGTERM, signal.SIGINT):
            if sig not in self.previous:
                self.previous[sig] = signal.getsignal(sig)
            self.loop.add_signal_handler(sig, self._received, sig)
        if _signalled and not self.stop.is_set():
            self._received(signal.Signals(_signalled[-1]))

    def remove(self) -> None:
        for sig, previous in self.previous.items():
            self.loop.remove_signal_handler(sig)
            signal.signal(sig, previous)
        self.previous.clear()

    def _received(self, sig: signal.Signals) -> None:
        if self.stop.is_set():
            log.info("already stopping", signal=sig.name)
            return
        log.info("signal received; stopping", signal=sig.name)
        self.stop.set()


async def serve(
    args: argparse.Namespace, config: k8s_config.OperatorConfig, *, stop: asyncio.Event | None = None
) -> int:
    """Run the operator until ``stop`` is set (by SIGTERM or SIGINT when not given) or a task fails.

    Returns the exit status: 0 after a stop, :data:`EXIT_FAILED` after a failure (see the module notes).
    """
    stop = stop if stop is not None else asyncio.Event()
    signals = _Signals(stop)
    signals.install()
    try:
        return await _serve(args, config, stop, signals)
    finally:
        signals.remove()


async def _serve(
    args: argparse.Namespace, config: k8s_config.OperatorConfig, stop: asyncio.Event, signals: _Signals
) -> int:
    settings = client_settings(args, config)
    # Reads the kubeconfig (no request yet): a file that cannot be used is an InvalidObject now, not after the
    # warm-up.
    client = await k8s_client.connect(settings)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(client.close)
        # Before anything else, so that the cycles never compile on the event loop; in a daemon thread, so that
        # a stop meanwhile neither waits for it nor is held up by it at exit. Not overlapped with the listings:
        # both hold the GIL, and overlapping made the start slower (docs/operator.md).
        started = time.monotonic()
        warm = _in_daemon_thread(_warm_kernels, config)
        if not await _until_stopped(stop, warm):
            warm.cancel()  # the thread's result, when it comes, goes nowhere
            log.info("stopped before the kernels were ready")
            return 0
        log.info("kernels ready", seconds=round(time.monotonic() - started, 2), placed=warm.result())
        # What the imports and the warm-up made (about a million objects: modules, numba's compiled kernels, the
        # generated API models) lives as long as the process: kept out of the collector's full passes, which else
        # walk it each time the listings' pods have grown the heap by a quarter. Decoding and parsing 10,000 pods
        # took 0.35 s of CPU instead of 0.55 s (benchmarks/listing_gc.py; docs/performance.md, start-up). The
        # command line may have deferred the full passes since the imports (scheduler/cli.py,
        # ``full_passes_deferred``): they are due again from now.
        gc.freeze()
        restore_collector: Callable[[], None] | None = getattr(args, "restore_collector", None)
        if restore_collector is not None:
            restore_collector()
        identity = args.identity or f"{socket.gethostname()}-{os.getpid()}"
        operator = Operator(client, config, identity=identity, scheduler_name=args.scheduler_name)
        await operator.start()
        stack.push_async_callback(_bounded, operator.close, "finishing bindings and writes", DRAIN_S)
        servers = await health.serve(
            operator,
            health_port=args.health_port,
            metrics_port=args.metrics_port,
            host=getattr(args, "bind_address", "0.0.0.0"),
        )
        stack.push_async_callback(servers.close)
        log.info("serving", health_port=servers.health_port, metrics_port=servers.metrics_port, identity=identity)
        advertised = str(getattr(args, "advertise_address", None) or getattr(args, "bind_address", "0.0.0.0"))
        published = explain_url(advertised, servers.health_port)
        # The dashboard (off unless --dashboard-port): a standby's sends viewers to the Lease holder's.
        leases: list[LeaseThread] = []
        board_url = ""
        if dashboard_options.wanted(args):
            # Imported only when asked for (see the module notes): its pages, map and explain are no part of a start
            # without it.
            from scheduler.k8s.serve import dashboard

            board = await dashboard.serve(
                args,
                operator,
                host=getattr(args, "bind_address", "0.0.0.0"),
                leader=lambda: leases[0].holder if leases else ("", ""),
                observer=_observing(args),
            )
            if board is not None:
                stack.push_async_callback(board.close)
                board_url = explain_url(advertised, board.port)
                log.info("dashboard", url=board_url, auth=getattr(args, "dashboard_auth", None) or "default")
        status = await _supervise(
            args,
            config,
            operator,
            client,
            settings,
            stop,
            signals,
            explain_url=published,
            dashboard_url=board_url,
            leases=leases,
        )
    return status


async def _supervise(
    args: argparse.Namespace,
    config: k8s_config.OperatorConfig,
    operator: Operator,
    client: k8s_client.Client,
    settings: k8s_client.ClientSettings,
    stop: asyncio.Event,
    signals: _Signals,
    *,
    explain_url: str = "",
    dashboard_url: str = "",
    leases: list[LeaseThread] | None = None,
) -> int:
    """Start the tasks, wait for a stop or for one of them to end, then end them all in order (bounded)."""
    # Before the scheduling task first runs: the zones are unknown until listed, or until discovery says that the
    # cluster does not serve them.
    operator.feed.zones.expect()
    kopf_stop = asyncio.Event()
    tasks: dict[str, asyncio.Task[Any]] = {
        "scheduling": asyncio.create_task(operator.run(), name="gpusched scheduling"),
        "watches": asyncio.create_task(
            handlers.watch(operator, client, settings, stop_flag=kopf_stop, started=signals.install),
            name="gpusched watches",
        ),
    }
    informers = informer.informers(
        client,
        {
            "nodes": (client.core.list_node, operator.node_event, lambda: list(operator.nodes)),
            "pods": (client.core.list_pod_for_all_namespaces, operator.pod_event, operator.held_pods),
            "services": (client.core.list_service_for_all_namespaces, operator.service_event, operator.service_keys),
            "poddisruptionbudgets": (
                client.policy.list_pod_disruption_budget_for_all_namespaces,
                operator.pdb_event,
                operator.budget_keys,
            ),
        },
        on_listed=operator.part_listed,
    )
    # PodGroups, listed once the CRDs are served (scheduler.k8s.feeds.handlers says why not through kopf).
    informers[handlers.PODGROUPS] = handlers.podgroup_informer(client, operator)
    # PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes (scheduler.k8s.ports.volume_binding).
    informers.update(volume_binding.informers(client, operator.feed.volumes))
    collector = asyncio.create_task(
        _listing_uncollected([watch.listed for watch in informers.values()], limit=LISTING_UNCOLLECTED_S),
        name="gpusched collector off while listing",
    )
    for kind, watch in informers.items():
        tasks[kind] = asyncio.create_task(watch.run(), name=f"gpusched {kind}")
    # The kinds of the optional APIs, where the cluster serves them (asked once, scheduler.k8s.feeds.discovery), else
    # their feature is off: DeviceClasses, ResourceSlices and ResourceClaims (scheduler.k8s.ports.device_claims;
    # without them DRA is off), NodeResourceTopology objects (scheduler.k8s.feeds.numa_zones; no NUMA rule).
    devices, zones = operator.feed.devices, operator.feed.zones
    optional: dict[
        str, tuple[discovery.OptionalApi, Callable[[], dict[str, informer.Informer]], Callable[[str], None]]
    ] = {
        "devices": (
            discovery.DRA,
            lambda: device_claims.informers(client, devices),
            lambda why: device_claims.switch_off(devices, why=why),
        ),
        "numa zones": (
            discovery.NUMA,
            lambda: numa_zones.informers(client, zones),
            lambda why: numa_zones.switch_off(zones),
        ),
    }
    for name, (api, loops, off) in optional.items():
        watched = discovery.watch_if_served(client, api, loops, off=off, metrics=operator.metrics)
        tasks[name] = asyncio.create_task(watched, name=f"gpusched {name}")
    lease: LeaseThread | None = None
    if _observing(args):
        pass  # gpusched dashboard: a local copy that never leads, and so never decides or writes
    elif config.leader_election.enabled:
        # Its own thread, event loop and client (scheduler.k8s.leader): the lease is renewed on time whatever the
        # scheduling loop and the main client's rate limiter are doing.
        lease_settings = dataclasses.replace(settings, qps=LEASE_QPS, burst=LEASE_BURST)
        lease = LeaseThread(
            lambda: k8s_client.connect(lease_settings),
            namespace=args.namespace,
            name=args.lease_name,
            identity=operator.identity,
            config=config.leader_election,
            on_change=operator.set_leading,
            loop=asyncio.get_running_loop(),
            explain_url=explain_url,
            dashboard_url=dashboard_url,
        )
        if leases is not None:
            leases.append(lease)
        lease.start()
        held = lease
        operator.lease_held = lambda: held.leading
        operator.lease_refusal = lambda: held.refusal
        tasks["lease"] = asyncio.create_task(lease.wait(), name="gpusched lease")
    else:
        operator.set_leading(True)

    stopper = asyncio.create_task(stop.wait(), name="gpusched stop")
    done, _ = await asyncio.wait([stopper, *tasks.values()], return_when=asyncio.FIRST_COMPLETED)
    status = 0
    for name, task in tasks.items():
        if task not in done:
            continue
        status = EXIT_FAILED
        error = None if task.cancelled() else task.exception()
        if error is not None:
            log.error("task failed; stopping", task=name, error=repr(error), exc_info=error)
        else:
            log.error("task ended on its own; stopping", task=name)
    log.info("stopping", status=status)
    operator.set_leading(False)
    if lease is not None:  # first, and given the time to hand the lease over
        await lease.stop(RELEASE_TIMEOUT_S + CANCEL_GRACE_S)
        await _end(tasks["lease"], grace=CANCEL_GRACE_S)
    await asyncio.gather(*(_end(tasks[name]) for name in ("scheduling", "devices", "numa zones", *informers)))
    kopf_stop.set()
    await _end(tasks["watches"], grace=WATCHES_STOP_S, cancel_first=False)
    await _end(stopper)
    await _end(collector)
    for name, task in tasks.items():
        if task.done() and not task.cancelled() and task.exception() is not None and task not in done:
            log.warning("task failed while stopping", task=name, error=repr(task.exception()))
    return status


async def _listing_uncollected(listed: list[asyncio.Event], *, limit: float) -> None:
    """Keep Python's collector off until every event of ``listed`` is set (the first listings are in), at most
    ``limit`` seconds; then freeze what they made, as the imports' objects are, and turn it back on.

    The first listing of a large cluster makes the heap grow by a dozen tracked objects a pod (its record, its
    labels, requests, the cache's entries), and the collector makes a full pass each time the heap has grown by a
    quarter: at 90,000 pods half the CPU of feeding them went to passes that found nothing to free (the pods'
    records live until the pods go, and are then freed by their reference counts, frozen or not). A listing makes
    no cycles to collect (none found after 90,000 pods), so nothing is kept that a pass would have freed. Left as
    it is when the collector was already off (whoever turned it off manages it).
    """
    if not gc.isenabled():
        return
    gc.disable()
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit):
                for event in listed:
                    await event.wait()
        gc.freeze()
    finally:
        gc.enable()


def _observing(args: argparse.Namespace) -> bool:
    """``gpusched dashboard``: the operator's watches and view without a lease (see scheduler.k8s.serve.dashboard)."""
    return bool(getattr(args, "observe", False))


def explain_url(address: str, port: int) -> str:
    """Where this replica's ``/explain`` answers, as the leader publishes it on the Lease.

    An address that means "all interfaces" names no host to reach: the loopback address of the same family stands
    for it (``gpusched run`` on the machine ``gpusched explain`` runs on); in a cluster, pass the pod's IP as
    ``--advertise-address``.
    """
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(address.strip(), address.strip())
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address in a URL
    return f"http://{host}:{port}"


async def _end(
    task: asyncio.Task[Any],
    *,
    grace: float = CANCEL_GRACE_S,
    limit: float = CANCEL_LIMIT_S,
    cancel_first: bool = True,
) -> bool:
    """Cancel ``task`` and wait until it ends, never more than ``grace + limit`` seconds; True if it ended.

    A cancel can be lost: in Python 3.11 ``asyncio.wait_for`` returns the awaited result instead of raising
    ``CancelledError`` when that result arrived in the same loop iteration as the cancel. The scheduling task's
    idle wait is one (``set_leading(False)`` wakes it just before it is cancelled): a standby then never ended
    and the process never exited. So a task still running after ``grace`` is cancelled again, every 0.1 s, and
    one still running ``limit`` seconds later is left behind with an error in the log. With ``cancel_first``
    false the task is only waited for during ``grace`` (it was asked to stop some other way).
    """
    if cancel_first:
        task.cancel()
    loop = asyncio.get_running_loop()
    done, _ = await asyncio.wait({task}, timeout=grace)
    deadline = loop.time() + limit
    while not done:
        if loop.time() >= deadline:
            log.error("task did not end when cancelled; leaving it behind", task=task.get_name())
            return False
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=min(0.1, max(0.0, deadline - loop.time())))
    if not task.cancelled():
        task.exception()  # retrieved, so that asyncio does not log it again at exit
    return True


async def _bounded(step: Callable[[], Coroutine[Any, Any, Any]], what: str, seconds: float) -> None:
    """Run ``step()`` for at most ``seconds`` (then cancel it, bounded too); log instead of raising."""
    task = asyncio.ensure_future(step())
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        log.warning("did not finish in time; going on", what=what, seconds=seconds)
        await _end(task)
    elif not task.cancelled() and task.exception() is not None:
        log.warning("failed while stopping", what=what, error=repr(task.exception()))


def _warm_kernels(config: k8s_config.OperatorConfig) -> int:
    """:func:`warm_kernels`, with numba told first not to look for the packages no kernel uses (scipy, cffi: 0.3 s of
    a start where they are installed; see ``scheduler.kernels.loading``)."""
    kernel_loading.skip_unused_support()
    return warm_kernels(config)


def _in_daemon_thread(function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``function(*args)`` in a daemon thread, as a future of the running loop.

    Unlike ``asyncio.to_thread``, whose worker threads the interpreter joins at exit, a daemon thread does not
    keep a stopping process alive until it is done (a cold kernel compile takes 20-40 s).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def body() -> None:
        try:
            result = function(*args)
        except BaseException as exc:  # handed to the loop, raised where the future is awaited
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(settle, None, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=body, name=f"gpusched {getattr(function, '__name__', 'work')}", daemon=True).start()
    return future


async def _until_stopped(stop: asyncio.Event, future: asyncio.Future[Any]) -> bool:
    """Wait for ``future`` unless ``stop`` comes first; True if the future is done (its error is raised)."""
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({stopper, future}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if not future.done():
        return False
    future.result()
    return True
