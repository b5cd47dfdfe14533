"""NUMA zones in the simulator (issue 42): the trace's nodes given zones, the kubelet's Topology Manager replayed on
every binding, and what a NUMA-blind policy binds that the kubelet refuses.

``gpusched simulate --numa POLICY`` gives every node the zones below under the kubelet policy ``POLICY`` and runs
each policy twice: NUMA-aware (the ``numa`` filter on, as the operator runs it) and NUMA-blind (the filter off, the
zones still counted by the cache). Without ``--numa`` (or with ``none``) nothing here runs and the simulator is what
it was.

Zones. A nodes CSV may carry a column ``numa_zones``: the node's number of NUMA zones (1..8); its CPUs, memory and
GPUs are split evenly among them, the remainder going to the lowest-numbered zones (CPUs in whole cores). A node
without the column, or with the cell empty, gets :func:`default_zones`: two zones for a node of 8 GPUs or more
(the two sockets of an HGX/DGX-like server), two for a node of an even number of GPUs with at least
:data:`TWO_SOCKET_CORES` cores (a two-socket server with a GPU or more per socket), one otherwise. One zone never
refuses a pod the node holds: it changes nothing.

Pods. The trace says nothing of QoS classes; its pods are taken as Guaranteed (requests equal to limits: the pods
the static CPU manager pins, the stream the issue's benchmark uses), one container each. So the kubelet aligns a
pod's whole GPUs (a share of a GPU is no device its device plugin hands out: not aligned), its CPUs when they are
whole (``cpu_milli`` a multiple of 1000: the CPU manager pins only those) and its memory (the memory manager's static
policy), as :mod:`scheduler.api.devices.topology_manager` replays it.

The kubelet. :class:`Kubelets` replays every binding on its own count of each zone (not the cache's: so that the
NUMA-aware run checks the scheduler's count, and reports no refusal when the filter holds). A pod the kubelet
refuses fails (``TopologyAffinityError``): its binding is undone, its room is free again, and it counts as refused
and not placed, as a pod that fits nowhere does in the FGD protocol (its controller's next pod would be another
arrival; none is made).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import numa as api_numa
from scheduler.api.devices import topology_manager
from scheduler.api.objects.node import MIB
from scheduler.api.objects.pod import PodRequest
from scheduler.framework.interface import Decision
from scheduler.framework.profile import PluginConfig, ProfileConfig
from scheduler.sim.trace import NodeSpec

#: The ``--numa`` choices: the kubelet's ``--topology-manager-policy``; ``none`` is the simulator without zones.
POLICIES = tuple(str(p) for p in api_numa.Policy)

#: Cores from which a node with an even number of GPUs (2, 4, 6) counts as a two-socket server: 2 x 32.
TWO_SOCKET_CORES = 64

#: What the simulator's pods are to the Topology Manager: Guaranteed, one container (see the module's first lines).
POD_ASK = api_numa.PodAsk(guaranteed=True, one_container=True)

#: The filter's plugin name (``scheduler.plugins.numa``).
FILTER = "numa"


def default_zones(node: NodeSpec) -> int:
    """How many zones a node without a ``numa_zones`` cell has (see the module's first lines)."""
    if node.gpus >= 8:
        return 2
    if node.gpus >= 2 and node.gpus % 2 == 0 and node.cpu_milli >= TWO_SOCKET_CORES * 1000:
        return 2
    return 1


def _split(total: int, count: int, *, unit: int = 1) -> list[int]:
    """``total`` in ``count`` near-equal parts, each a whole number of ``unit``: the units left over go one each to
    the first parts, and what is less than a unit to the first."""
    units, below = divmod(total, unit)
    base, extra = divmod(units, count)
    parts = [(base + (1 if i < extra else 0)) * unit for i in range(count)]
    parts[0] += below
    return parts


def node_zones(node: NodeSpec, policy: api_numa.Policy) -> api_numa.NodeZones:
    """``node``'s zones, empty, under the kubelet policy ``policy`` (scope ``container``: one container a pod)."""
    count = node.numa_zones if node.numa_zones is not None else default_zones(node)
    cpus = _split(node.cpu_milli, count, unit=1000)
    memory = _split(node.memory_mib, count)
    gpus = _split(node.gpus, count)
    zones = []
    for i in range(count):
        amounts = {resources.CPU: cpus[i], resources.MEMORY: memory[i] * MIB}
        if node.gpus:
            amounts[resources.GPU] = gpus[i]
        zones.append(api_numa.Zone(f"node-{i}", i, dict(amounts), dict(amounts), dict(amounts)))
    return api_numa.NodeZones(node.name, policy, api_numa.Scope.CONTAINER, tuple(zones))


def parse_policy(raw: str) -> api_numa.Policy:
    try:
        return api_numa.Policy(raw)
    except ValueError:
        raise InvalidObject(
            f"unknown Topology Manager policy {raw!r} (one of {', '.join(POLICIES)})",
            obj="gpusched simulate",
            field="--numa",
        ) from None


def aware(config: ProfileConfig) -> ProfileConfig:
    """``config`` with the ``numa`` filter (weight 0 where it was not there: the policy's own score decides)."""
    if any(p.name == FILTER for p in config.plugins):
        return config
    return dataclasses.replace(config, plugins=(*config.plugins, PluginConfig(FILTER, 0.0)))


def blind(config: ProfileConfig) -> ProfileConfig:
    """``config`` without the ``numa`` plugin."""
    return dataclasses.replace(config, plugins=tuple(p for p in config.plugins if p.name != FILTER))


@dataclass(frozen=True, slots=True)
class Refusal:
    """A binding the kubelet refused."""

    pod: str
    node: str
    why: str
    #: GPU-milli the pod asked for.
    gpu_milli: int
    #: Whether the node's zones could not hold the pod even empty (only another node could have).
    never: bool


@dataclass
class Kubelets:
    """The nodes' kubelets: each binding admitted or refused on their own count of every zone."""

    zones: dict[str, api_numa.NodeZones]
    #: Node -> what each zone has left.
    left: dict[str, list[dict[str, int]]] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)

    @classmethod
    def of(cls, nodes: Sequence[NodeSpec], policy: api_numa.Policy) -> Kubelets:
        zones = {n.name: node_zones(n, policy) for n in nodes}
        return cls(zones, {name: [dict(z.available) for z in nz.zones] for name, nz in zones.items()})

    def admit(self, pod: PodRequest, node: str) -> Refusal | None:
        """Whether ``node``'s kubelet admits ``pod`` (None) or refuses it; an admitted pod takes its share."""
        zones = self.zones[node]
        left = self.left[node]
        admission = topology_manager.admit_pod(zones, pod, available=left)
        if not admission.admitted:
            empty = [z.capacity for z in zones.zones]
            never = not topology_manager.admit_pod(zones, pod, available=empty).admitted
            refusal = Refusal(pod.key, node, admission.why, pod.gpu.count * pod.gpu.milli, never)
            self.refusals.append(refusal)
            return refusal
        for i, taken in enumerate(admission.taken):
            for name, amount in taken.items():
                left[i][name] -= amount
        return None


class KubeletBinder:
    """Binds as the kubelet admits: an admitted pod is confirmed at once, a refused one's binding undone."""

    def __init__(self, kubelets: Kubelets) -> None:
        self.kubelets = kubelets
        self.confirm: Callable[[str], None] = lambda key: None
        self.fail: Callable[[str], None] = lambda key: None
        #: Whether the last binding was refused.
        self.refused = False

    def bind(self, decision: Decision) -> None:
        self.refused = self.kubelets.admit(decision.pod, decision.node) is not None
        if self.refused:
            self.fail(decision.pod.key)
        else:
            self.confirm(decision.pod.key)


def ask(request: PodRequest) -> PodRequest:
    """``request`` as the simulator's pods are to the Topology Manager (:data:`POD_ASK`)."""
    return dataclasses.replace(request, numa=POD_ASK)


def blind_name(policy: str) -> str:
    """The name a policy's NUMA-blind run has in the results."""
    return f"{policy} numa-blind"


def summary(refusals: Sequence[Refusal], capacity_milli: float) -> dict[str, float]:
    """One run's refusals counted: pods, those no zone of their node could hold even empty, and the GPU they asked
    for (% of the cluster's GPU-milli, ``capacity_milli``)."""
    return {
        "refused_pods": float(len(refusals)),
        "refused_never_fit": float(sum(1 for r in refusals if r.never)),
        "refused_gpu_pct": 100.0 * sum(r.gpu_milli for r in refusals) / capacity_milli,
    }


def mean_summary(summaries: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The :func:`summary` of several seeds, each count a mean over them."""
    return {key: sum(s[key] for s in summaries) / len(summaries) for key in summaries[0]}


def zone_counts(nodes: Sequence[NodeSpec]) -> dict[int, int]:
    """How many nodes have each number of zones."""
    counts: dict[int, int] = {}
    for node in nodes:
        count = node.numa_zones if node.numa_zones is not None else default_zones(node)
        counts[count] = counts.get(count, 0) + 1
    return dict(sorted(counts.items()))


def described(policy: api_numa.Policy, nodes: Sequence[NodeSpec]) -> dict[str, Any]:
    """What the zones were, for the JSON file."""
    return {
        "policy": str(policy),
        "scope": str(api_numa.Scope.CONTAINER),
        "nodes_by_zones": {str(k): v for k, v in zone_counts(nodes).items()},
        "nodes_from_column": sum(1 for n in nodes if n.numa_zones is not None),
        "pods": "Guaranteed, one container: whole GPUs, whole CPUs and memory aligned",
    }


def table(
    results: Mapping[str, Mapping[str, Any]],
    names: Sequence[str],
    ratio_key: str,
    policy: api_numa.Policy,
    nodes: Sequence[NodeSpec],
) -> str:
    """One row per policy: its allocation NUMA-aware and NUMA-blind, and the pods the kubelet refused in each run;
    then what each column means."""
    counts = ", ".join(
        f"{zones} zone{'s' if zones > 1 else ''} on {count}" for zones, count in zone_counts(nodes).items()
    )
    given = sum(1 for n in nodes if n.numa_zones is not None)
    source = f"{given} from the numa_zones column" if given else "the default rule"
    width = max([16, *(len(name) + 2 for name in names)])
    head = (
        f"{'policy':<{width}}{'aware@' + ratio_key + '%':>13}{'blind@' + ratio_key + '%':>13}{'blind-aware':>13}"
        f"{'refused':>9}{'never fit':>11}{'refused GPU':>13}{'aware refused':>15}"
    )
    lines = [
        f"NUMA zones, Topology Manager policy {policy}: {counts} ({source}); pods Guaranteed",
        head,
        "-" * len(head),
    ]
    for name in names:
        aware_run, blind_run = results[name], results[blind_name(name)]
        at_aware = float(aware_run["alloc_at"].get(ratio_key, float("nan")))
        at_blind = float(blind_run["alloc_at"].get(ratio_key, float("nan")))
        refused = blind_run["numa"]
        lines.append(
            f"{name:<{width}}{at_aware:>12.2f}%{at_blind:>12.2f}%{at_blind - at_aware:>+13.2f}"
            f"{refused['refused_pods']:>9.1f}{refused['refused_never_fit']:>11.1f}{refused['refused_gpu_pct']:>12.2f}%"
            f"{aware_run['numa']['refused_pods']:>15.1f}"
        )
    lines += [
        "",
        "aware@X%     GPU allocated at X% arrived with the numa filter on (the rows above named by the policy);",
        "blind@X%     with it off (the rows '... numa-blind'), counting only the pods the kubelet admitted",
        "blind-aware  points of allocation the NUMA-blind run wins (> 0) or loses (< 0) against the aware one",
        "refused      pods the blind run bound that the kubelet refused (TopologyAffinityError; they fail), per seed;",
        "             never fit: of them, those whose node's zones could not hold them even empty",
        "refused GPU  the GPU those pods asked for, % of the cluster's GPU-milli",
        "aware refused  the same count for the aware run (0: the filter kept every rule the kubelet checks)",
    ]
    return "\n".join(lines)
