"""Indexes over the pods the cache holds, for filters that look at other pods rather than at free room.

:class:`PortIndex` answers "on which nodes does this pod's host port conflict?" for every node at once: per
(protocol, port) in use anywhere, per node slot the number of pods using it on every address (``0.0.0.0``),
and the number using it on each specific address. A pod without host ports costs nothing here; a pod with some
costs one array expression per port, however many nodes and pods there are.

The cache keeps it in step (:meth:`scheduler.cache.state.Cache._add` and ``remove_pod``); a what-if's own
placements are not in it (see ``Snapshot.what_if_pods``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from scheduler.api.ports import ANY_IP, HostPort

I32 = npt.NDArray[np.int32]
B = npt.NDArray[np.bool_]


class _PortUse:
    """Per node slot, how many pods use one (protocol, port): on every address, and on each specific one."""

    __slots__ = ("any_ip", "by_ip")

    def __init__(self, slots: int) -> None:
        self.any_ip: I32 = np.zeros(slots, dtype=np.int32)
        self.by_ip: dict[str, I32] = {}

    def add(self, slot: int, ip: str, sign: int) -> None:
        if ip == ANY_IP:
            self.any_ip = _fit(self.any_ip, slot)
            self.any_ip[slot] += sign
            return
        counts = self.by_ip.get(ip)
        counts = _fit(counts if counts is not None else np.zeros(slot + 1, dtype=np.int32), slot)
        counts[slot] += sign
        if counts.any():
            self.by_ip[ip] = counts
        else:
            self.by_ip.pop(ip, None)

    @property
    def empty(self) -> bool:
        return not self.by_ip and not self.any_ip.any()


def _fit(counts: I32, slot: int) -> I32:
    if slot < counts.shape[0]:
        return counts
    grown = np.zeros(max(slot + 1, 2 * counts.shape[0]), dtype=np.int32)
    grown[: counts.shape[0]] = counts
    return grown


def _at_least(mask: B, counts: I32) -> None:
    size = min(mask.shape[0], counts.shape[0])
    mask[:size] |= counts[:size] > 0


class PortIndex:
    """(protocol, port) -> per node slot, the pods using it; kept in step with the cache's pods."""

    def __init__(self) -> None:
        self._uses: dict[tuple[str, int], _PortUse] = {}

    def add(self, slot: int, ports: Iterable[HostPort], sign: int = 1) -> None:
        """Count (``sign`` = 1) or uncount (-1) a pod's host ports on node ``slot``."""
        for port in ports:
            key = (port.protocol, port.port)
            use = self._uses.get(key)
            if use is None:
                use = self._uses[key] = _PortUse(slot + 1)
            use.add(slot, port.ip, sign)
            if use.empty:
                del self._uses[key]

    def conflicts(self, ports: Iterable[HostPort], slots: int) -> B:
        """Per node slot (``slots`` of them), whether some pod there holds a port conflicting with ``ports``."""
        mask = np.zeros(slots, dtype=bool)
        for port in ports:
            use = self._uses.get((port.protocol, port.port))
            if use is None:
                continue
            _at_least(mask, use.any_ip)
            if port.ip == ANY_IP:
                for counts in use.by_ip.values():
                    _at_least(mask, counts)
            else:
                specific = use.by_ip.get(port.ip)
                if specific is not None:
                    _at_least(mask, specific)
        return mask

    def __len__(self) -> int:
        return len(self._uses)
