"""Where a process's CPU goes: a sampling profiler on CPU time, for a scheduler run under a benchmark.

    python -m benchmarks.cpu_profile OUT MODULE [ARGS...]     # runs ``python -m MODULE ARGS...``

Why not cProfile: it times every call, and the scheduler's hot path is thousands of small calls per pod (the
generated client's models, the watch's parse), so the profiler's own cost moves the figures it reports; and
its default clock is the wall's. Here ``setitimer(ITIMER_PROF)`` interrupts the process every :data:`INTERVAL_S`
seconds of its CPU time (user and system, every thread; the kernel rounds that up to its tick, about 4 ms on the
machine of docs/performance.md) and the handler records the main thread's Python stack:
a function's share of the samples is its share of the CPU, at a cost of a few percent. Time spent in C (a JSON
decoder, the TLS layer) is counted to the Python line that called it, which is what one can change. Time in
another thread is counted to whatever the main thread was running: gpusched runs its work on the event loop's
thread.

At exit (a signal's orderly stop included) OUT gets the collapsed stacks (``frame;frame;frame count``, what
flame graph tools read), OUT.txt a summary: the functions by own samples (the line the sample fell on) and by
samples anywhere on the stack, and OUT.timeline.txt the same samples in order of the wall clock, in windows of
:data:`WINDOW_S` from the process start: how many fell in each and on what (the deepest frame of ``scheduler/``
below the event loop, else the module being imported, else the callback the loop ran). That is where a start's
time goes, step after step. ``GPUSCHED_BENCH_PROFILE=DIR`` makes ``benchmarks.e2e_throughput`` run gpusched under
this profiler (``DIR/CASE.stacks``).
"""

from __future__ import annotations

import atexit
import collections
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

#: Seconds of process CPU time between two samples.
INTERVAL_S = 0.001
#: Rows of each table in the summary.
TOP = 60
#: Seconds of wall clock in each row of the timeline.
WINDOW_S = 0.05
#: Functions named in each row of the timeline.
TIMELINE_TOP = 3


class Sampler:
    """Counts the main thread's stacks at each tick of the process's CPU-time timer."""

    def __init__(self) -> None:
        self.stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.samples = 0
        self.started = time.monotonic()
        #: (seconds since the start, the sample's stack) of each sample, in order; labelled at the end, not in the
        #: handler, so the profiler's own cost per sample stays what it was.
        self.timeline: list[tuple[float, tuple[str, ...]]] = []

    def start(self) -> None:
        signal.signal(signal.SIGPROF, self._tick)
        signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)

    def _tick(self, _signum: int, frame: FrameType | None) -> None:
        names: list[str] = []
        leaf = True
        while frame is not None:
            code = frame.f_code
            where = f"{_short(code.co_filename)}:{code.co_name}"
            names.append(f"{where}:{frame.f_lineno}" if leaf else where)
            leaf = False
            frame = frame.f_back
        stack = tuple(reversed(names))
        self.stacks[stack] += 1
        self.samples += 1
        self.timeline.append((time.monotonic() - self.started, stack))

    def write(self, out: Path) -> None:
        out.write_text("".join(f"{';'.join(stack)} {n}\n" for stack, n in self.stacks.most_common()))
        own: collections.Counter[str] = collections.Counter()
        own_fn: collections.Counter[str] = collections.Counter()
        anywhere: collections.Counter[str] = collections.Counter()
        for stack, n in self.stacks.items():
            own[stack[-1]] += n
            own_fn[stack[-1].rsplit(":", 1)[0]] += n
            for name in {name.rsplit(":", 1)[0] if i == len(stack) - 1 else name for i, name in enumerate(stack)}:
                anywhere[name] += n
        total = max(1, self.samples)
        asked = f"asked every {INTERVAL_S * 1000:g} ms of CPU; the kernel's tick may be longer"
        lines = [f"{self.samples} samples ({asked})\n"]
        lines += ["\n== CPU seconds by thread (user, system), from /proc\n", *_threads()]
        tables = (("own, by line", own), ("own, by function", own_fn), ("anywhere on the stack", anywhere))
        for title, counter in tables:
            lines.append(f"\n== {title}\n")
            lines += [f"{n:7d} {100 * n / total:5.1f}%  {name}\n" for name, n in counter.most_common(TOP)]
        Path(f"{out}.txt").write_text("".join(lines))
        labelled = [(at, _label(stack)) for at, stack in self.timeline]
        Path(f"{out}.timeline.txt").write_text("".join(_timeline(labelled)))


def _label(stack: tuple[str, ...]) -> str:
    """What a sample was doing, for the timeline. Of the frames below the event loop's call of a callback (all of
    them outside the loop): the deepest of gpusched's package, else the module being imported, else the callback
    itself (kopf's workers, aiohttp's writes, asyncio's reads), else the leaf."""
    calls = [i for i, name in enumerate(stack) if name.endswith("asyncio/events.py:_run")]
    own = stack[calls[-1] + 1 :] if calls else stack
    for name in reversed(own):
        if name.startswith("scheduler/") and not name.startswith("scheduler/cli.py"):
            return _function(name, stack)
    for name in reversed(own):
        if name.endswith(":<module>"):
            return name
    if calls and own:
        return _function(own[0], stack)
    return _function(stack[-1], stack) if stack else "?"


def _function(name: str, stack: tuple[str, ...]) -> str:
    """``name`` without the line number that the stack's leaf carries."""
    return name.rsplit(":", 1)[0] if name is stack[-1] else name


def _timeline(samples: list[tuple[float, str]]) -> list[str]:
    """One line per window of :data:`WINDOW_S` that has samples: its start, its samples, its commonest labels."""
    windows: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for at, label in samples:
        windows[int(at / WINDOW_S)][label] += 1
    lines = [f"samples in each {WINDOW_S * 1000:g} ms of wall clock from the process start, and on what\n"]
    for index in sorted(windows):
        counter = windows[index]
        top = ", ".join(f"{n} {label}" for label, n in counter.most_common(TIMELINE_TOP))
        lines.append(f"{index * WINDOW_S:7.2f} s {sum(counter.values()):4d}  {top}\n")
    return lines


def _threads() -> list[str]:
    """Each live thread's name and CPU seconds: what the main thread's samples cannot tell apart."""
    rows = []
    tick = os.sysconf("SC_CLK_TCK")
    for task in sorted(Path("/proc/self/task").iterdir()):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        rows.append(f"{task.name:>8} {name:<20} {int(fields[11]) / tick:8.2f} {int(fields[12]) / tick:8.2f}\n")
    return rows


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    for marker in ("/scheduler/", "/benchmarks/"):
        if marker in filename:
            return marker.strip("/") + "/" + filename.split(marker, 1)[1]
    return filename


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m benchmarks.cpu_profile OUT MODULE [ARGS...]")
    out, module = Path(sys.argv[1]), sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    sampler = Sampler()
    written = threading.Event()

    def finish() -> None:
        if not written.is_set():
            written.set()
            sampler.stop()
            sampler.write(out)

    atexit.register(finish)
    sampler.start()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        finish()


if __name__ == "__main__":
    main()
