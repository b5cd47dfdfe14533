"""CPU seconds of processes, read from /proc: what a benchmark's processes spent while they shared this machine.

On a machine of a few cores the API server, etcd and the scheduler under test take CPU from one another, so a
scheduler's rate is bounded by what the control plane needs per pod as much as by its own work. These figures
say where the CPU of a run went. Linux only; elsewhere every figure reads 0.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

#: The processes of tests/e2e/localcluster.py's control plane, by command name (``comm``, at most 15 characters).
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller", "kwok")


def cpu_seconds(pid: int) -> float:
    """The process's CPU seconds so far (user + system); 0 where /proc does not tell."""
    stat = _stat(pid)
    return 0.0 if stat is None else stat[2]


def descendants(root: int) -> list[int]:
    """The processes below ``root`` (children, their children, ...), ``root`` left out."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            children.setdefault(stat[1], []).append(int(entry.name))
    found: list[int] = []
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def by_command(pids: Iterable[int]) -> dict[str, float]:
    """CPU seconds so far per command name, summed over ``pids``."""
    totals: dict[str, float] = {}
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            totals[stat[0]] = totals.get(stat[0], 0.0) + stat[2]
    return totals


def spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What each command spent between two :func:`by_command` readings (a process started between counts whole)."""
    return {name: after[name] - before.get(name, 0.0) for name in after}


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(command name, parent pid, CPU seconds) of ``pid``; None if it is gone or /proc does not tell."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.find("(") + 1 : text.rfind(")")]
    # After the command's name: state is field 3 of proc(5), ppid field 4, utime and stime fields 14 and 15.
    fields = text.rpartition(")")[2].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds this machine's cores have been busy since boot, all processes (/proc/stat's first line)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(f) for f in fields]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


class Reading:
    """CPU spent from one point of a run to another: the control plane's (and each of its processes'), the
    scheduler's (every other process this one started), this process's own, and the whole machine's (other work on
    it included)."""

    def __init__(self) -> None:
        self.start = self._now()

    @staticmethod
    def _now() -> dict[str, float]:
        me = os.getpid()
        commands = by_command(descendants(me))
        plane = {name: commands.get(name, 0.0) for name in CONTROL_PLANE}
        return {
            "control plane": sum(plane.values()),
            **plane,
            "scheduler": sum(commands.values()) - sum(plane.values()),
            "harness": cpu_seconds(me),
            "machine": machine_busy(),
        }

    def spent(self) -> dict[str, float]:
        """CPU seconds per part since this reading was taken."""
        return spent(self.start, self._now())
