"""The nodes whose kubelet refused a pod of an owner for its NUMA zones, remembered for a while (issue 42).

The ``numa`` filter replays the kubelet's Topology Manager on what the zones' NodeResourceTopology says and on the
scheduler's own count, but the kubelet may still refuse a pod there (``status.reason: TopologyAffinityError``): no
object published for the node, an agent that lags or counts otherwise, CPUs the kubelet reserves that the object does
not show. The pod fails; its controller (the same ReplicaSet, Job...) makes another at once, and the same rule on the
same figures would send it to the same node again: refused over and over, as users saw on 2-socket GPU nodes
(pytorch/ci-infra #696, KAI-Scheduler #1598). So the cache remembers, per owner (the controller's uid) and node,
until when the owner's pods keep off that node: :data:`TTL_S` after the refusal was seen, long enough for the node's
agent to publish its zones again (every 60 s by default), short enough that a node the kubelet refused once for a
reason gone since is used again. Another owner's pods are not kept off: their shape may fit where this one did not.

The memory is the cache's, not the API server's: after a restart (or a relist) it is rebuilt from the failed pods the
listing shows, each counted from its ``status.startTime`` (the kubelet sets it when it refuses a pod), so a pod
refused long ago keeps nothing off. Every input enters through :meth:`KubeletRefusals.refused`;
:meth:`KubeletRefusals.nodes` answers what an owner's pods avoid now. Times are wall-clock seconds (the pods'
timestamps are). A cluster where no kubelet refused anything pays one test of an empty dict per pod.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds an owner's pods keep off a node after its kubelet refused one of them.
TTL_S = 300.0


class KubeletRefusals:
    """Owner uid -> node -> until when the owner's pods keep off the node (the clock's seconds)."""

    def __init__(self, *, ttl_s: float = TTL_S, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._until: dict[str, dict[str, float]] = {}

    def refused(self, *, owner: str, node: str, at: float = 0.0) -> bool:
        """The kubelet of ``node`` refused a pod of ``owner`` at ``at`` (0: now): the owner's pods keep off the node
        until :attr:`ttl_s` after that. Returns whether that is news (neither known already nor over)."""
        now = self.clock()
        until = (min(at, now) if at else now) + self.ttl_s
        nodes = self._until.get(owner, {})
        if until <= now or nodes.get(node, 0.0) >= until:
            return False
        self._until[owner] = {**nodes, node: until}
        return True

    def nodes(self, owner: str) -> list[str]:
        """The nodes ``owner``'s pods keep off now (those whose time is up are forgotten here)."""
        if owner not in self._until:
            return []
        now = self.clock()
        nodes = self._until[owner]
        for node in [n for n, until in nodes.items() if until <= now]:
            del nodes[node]
        if not nodes:
            del self._until[owner]
        return list(nodes)
