"""The composition root: the one place where a cache, a scheduler with its profile, a queue and the scheduling loop
are put together, for the operator (``scheduler.k8s.operator``), the simulator (``scheduler.sim``) and the
benchmarks.

Callers differ only in their ports (who binds, who hears Events, who evicts and who moves pods), their clock and
their queue's backoff; what is wired to what is decided here, so that a simulated run and a cluster run the same
core put together the same way. Two entry points, one on top of the other:

- :func:`build_scheduler`: a cache (given, or a new one filled with ``nodes``) and a scheduler with the profile's
  plugins over it, for cycles run one pod at a time (the arrival simulator, warm-up, cost benchmarks);
- :func:`build`: that, plus the scheduling queue and the :class:`~scheduler.core.loop.SchedulingLoop` with the
  profile's actions (the operator, the job simulations).

Invariant kept here: the loop gets a mover only when the profile runs ``consolidate`` (no other action moves
pods, and without the action a mover would never be called).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scheduler.api.objects.node import NodeInfo
from scheduler.cache.state import Cache
from scheduler.core.cycle import Scheduler
from scheduler.core.extension_points import Framework
from scheduler.core.loop import SchedulingLoop
from scheduler.core.ports import Events, Evictor, Mover
from scheduler.framework.interface import Binder
from scheduler.framework.profile import ProfileConfig
from scheduler.queue.scheduling import SchedulingQueue

__all__ = ["Core", "build", "build_scheduler"]


@dataclass(frozen=True)
class Core:
    """The scheduling core of one cluster (real or simulated), as :func:`build` puts it together."""

    cache: Cache
    scheduler: Scheduler
    queue: SchedulingQueue
    loop: SchedulingLoop


def build_scheduler(
    config: ProfileConfig,
    *,
    binder: Binder,
    nodes: Iterable[NodeInfo] = (),
    cache: Cache | None = None,
    instrument: Callable[[Framework], None] | None = None,
) -> Scheduler:
    """A scheduler running ``config``'s plugins over ``cache`` (default: a new cache), handing decisions to
    ``binder``; ``nodes`` are added to the cache first. ``instrument`` sees the framework before anything uses it
    (the operator's metrics wrap the plugins there)."""
    if cache is None:
        cache = Cache()
    for info in nodes:
        cache.upsert_node(info)
    framework = Framework.build(config)
    if instrument is not None:
        instrument(framework)
    return Scheduler(cache, framework, binder)


def build(
    config: ProfileConfig,
    *,
    binder: Binder,
    clock: Callable[[], float],
    events: Events,
    nodes: Iterable[NodeInfo] = (),
    cache: Cache | None = None,
    evictor: Evictor | None = None,
    mover: Mover | None = None,
    reserve_after_s: float | None = None,
    initial_backoff_s: float = 1.0,
    max_backoff_s: float = 10.0,
    pop_from_backoff: bool = False,
    instrument: Callable[[Framework], None] | None = None,
) -> Core:
    """The cache, scheduler, queue and loop of one cluster scheduled with ``config``, on ``clock``.

    :param binder: binds the loop's decisions (the API server's Binding; the simulator confirms at once).
    :param events: hears what users should see (Kubernetes Events; a count in the simulator).
    :param evictor: deletes preempted pods; without one the loop does not preempt.
    :param mover: evicts the pods consolidation moves; used only when ``config.actions`` has ``consolidate``.
    :param reserve_after_s: how long a job waits before the loop holds room for it (None: never).
    :param initial_backoff_s: the queue's wait after a first failed attempt (it doubles up to ``max_backoff_s``).
    :param pop_from_backoff: whether an idle queue retries a pod a cluster event woke before its backoff ends (as
        kube-scheduler v1.33+, ``SchedulerPopFromBackoffQ``).
    """
    scheduler = build_scheduler(config, binder=binder, nodes=nodes, cache=cache, instrument=instrument)
    queue = SchedulingQueue(
        clock=clock,
        initial_backoff_s=initial_backoff_s,
        max_backoff_s=max_backoff_s,
        pop_from_backoff=pop_from_backoff,
    )
    loop = SchedulingLoop(
        scheduler,
        queue,
        clock=clock,
        events=events,
        evictor=evictor,
        mover=mover if "consolidate" in config.actions else None,
        reserve_after_s=reserve_after_s,
    )
    return Core(scheduler.cache, scheduler, queue, loop)
