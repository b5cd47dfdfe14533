"""The simulator with NUMA zones (``--numa``): zones from the nodes CSV's ``numa_zones`` column or the default
rule, and what a NUMA-blind policy binds that the kubelet refuses, on clusters small enough to work out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler import cli
from scheduler.api.basics import resources
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices.numa import Policy
from scheduler.api.objects.node import MIB
from scheduler.sim import engine, policies, trace
from scheduler.sim import numa as sim_numa
from scheduler.sim.trace import NodeSpec, PodSpec
from tests.sim.files import MULTIGPU_HEADER, NODE_HEADER, write

ZONED_HEADER = NODE_HEADER + ",numa_zones"


def _zones(node: NodeSpec) -> list[tuple[int, int, int]]:
    """(milli-CPU, MiB, GPUs) of each zone."""
    made = sim_numa.node_zones(node, Policy.SINGLE_NUMA_NODE)
    return [
        (z.capacity[resources.CPU], z.capacity[resources.MEMORY] // MIB, z.capacity.get(resources.GPU, 0))
        for z in made.zones
    ]


def test_the_numa_zones_column_gives_the_count_and_an_empty_cell_the_default(tmp_path: Path) -> None:
    path = write(
        tmp_path / "nodes.csv",
        ZONED_HEADER,
        ["four,96000,393216,8,G2,4", "default,96000,393216,8,G2,", "one,96000,393216,8,G2,1"],
    )
    four, default, one = trace.load_nodes(path)
    assert (four.numa_zones, default.numa_zones, one.numa_zones) == (4, None, 1)
    assert _zones(four) == [(24000, 98304, 2)] * 4
    assert _zones(default) == [(48000, 196608, 4)] * 2
    assert _zones(one) == [(96000, 393216, 8)]


@pytest.mark.parametrize(("cell", "says"), [("0", "0 is outside 1..8"), ("9", "9 is outside 1..8"), ("two", "'two'")])
def test_a_bad_numa_zones_cell_names_the_line_and_the_column(tmp_path: Path, cell: str, says: str) -> None:
    path = write(tmp_path / "nodes.csv", ZONED_HEADER, ["a,8000,1024,1,T4,1", f"b,8000,1024,1,T4,{cell}"])
    with pytest.raises(InvalidObject) as err:
        trace.load_nodes(path)
    assert f"file {path} line 3" in str(err.value)
    assert "numa_zones" in str(err.value)
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("node", "zones"),
    [
        # 8 GPUs: two sockets, whatever the cores.
        (NodeSpec("g2", 96000, 393216, 8, "G2"), [(48000, 196608, 4)] * 2),
        # An odd count of cores splits in whole cores, the extra one to zone 0.
        (NodeSpec("v100", 82000, 344064, 8, "V100M16"), [(41000, 172032, 4)] * 2),
        # 2 or 4 GPUs on 64 cores or more: a two-socket server.
        (NodeSpec("t4", 104000, 524288, 2, "T4"), [(52000, 262144, 1)] * 2),
        (NodeSpec("t4x4", 96000, 393216, 4, "T4"), [(48000, 196608, 2)] * 2),
        # Fewer cores, or one GPU, or none: one zone, the whole node.
        (NodeSpec("p100", 16000, 122880, 2, "P100"), [(16000, 122880, 2)]),
        (NodeSpec("a10", 128000, 1048576, 1, "A10"), [(128000, 1048576, 1)]),
        (NodeSpec("cpu", 128000, 1048576, 0, ""), [(128000, 1048576, 0)]),
    ],
)
def test_the_default_rule_splits_two_socket_gpu_servers_evenly(
    node: NodeSpec, zones: list[tuple[int, int, int]]
) -> None:
    assert _zones(node) == zones


def test_three_zones_share_what_does_not_divide_from_zone_0() -> None:
    node = NodeSpec("odd", 100500, 1001, 8, "G2", numa_zones=3)
    assert _zones(node) == [(34500, 334, 3), (33000, 334, 3), (33000, 333, 2)]


# Two 8-GPU nodes of two zones (4 GPUs, 32 cores, 128 GiB each). binpack fills node a first.
NODES = [NodeSpec("a", 64000, 262144, 8, "G2"), NodeSpec("b", 64000, 262144, 8, "G2")]
# Two 3-GPU pods: a's zones keep 1 GPU each, 2 GPUs on the node. Then a 2-GPU pod: the node has room, no zone has.
PODS = [PodSpec("p3", 4000, 8192, 3, 1000), PodSpec("q3", 4000, 8192, 3, 1000), PodSpec("r2", 2000, 8192, 2, 1000)]


def _run(variant: str, pods: list[PodSpec], policy: Policy) -> tuple[engine.ArrivalRun, sim_numa.Kubelets]:
    kubelets = sim_numa.Kubelets.of(NODES, policy)
    config = policies.build("binpack", shapes=[], seed=0)
    config = sim_numa.aware(config) if variant == "aware" else sim_numa.blind(config)
    return engine.run_arrivals(NODES, pods, config, shapes=[], numa=kubelets), kubelets


def _where(run: engine.ArrivalRun) -> dict[str, str | None]:
    assert run.cache is not None
    return {e.pod.name.split("#")[0]: run.cache.names[e.placement.slot] for e in run.cache.pods()}


def test_a_blind_policy_binds_a_pod_the_kubelet_refuses_and_the_aware_one_does_not() -> None:
    blind, kubelets = _run("blind", PODS, Policy.SINGLE_NUMA_NODE)
    # binpack sends r2 to a, where 2 GPUs are free but one in each zone: the kubelet refuses it, and it fails.
    assert blind.placed.tolist() == [True, True, False]
    assert blind.refused is not None and blind.refused.tolist() == [False, False, True]
    assert [(r.pod, r.node, r.never, r.gpu_milli) for r in kubelets.refusals] == [("trace/r2#2", "a", False, 2000)]
    assert kubelets.refusals[0].why == "no NUMA zone has 2 nvidia.com/gpu (single-numa-node)"
    assert _where(blind) == {"p3": "a", "q3": "a"}
    assert blind.allocated.tolist() == [3000, 6000, 6000]

    aware, kubelets = _run("aware", PODS, Policy.SINGLE_NUMA_NODE)
    # The numa filter refuses a for r2: it goes to b, and the kubelet admits every pod.
    assert aware.placed.tolist() == [True, True, True]
    assert kubelets.refusals == []
    assert _where(aware) == {"p3": "a", "q3": "a", "r2": "b"}
    assert aware.allocated.tolist() == [3000, 6000, 8000]


def test_restricted_admits_what_spans_the_fewest_zones_it_can() -> None:
    # 2 GPUs could come from one zone, so two zones is not the fewest: restricted refuses r2 on a as well.
    blind, kubelets = _run("blind", PODS, Policy.RESTRICTED)
    assert blind.placed.tolist() == [True, True, False]
    assert [r.pod for r in kubelets.refusals] == ["trace/r2#2"]
    # 8 GPUs need both zones of any node: restricted admits it, single-numa-node never does.
    whole = [PodSpec("all8", 8000, 8192, 8, 1000)]
    blind, kubelets = _run("blind", whole, Policy.RESTRICTED)
    assert blind.placed.tolist() == [True] and kubelets.refusals == []
    blind, kubelets = _run("blind", whole, Policy.SINGLE_NUMA_NODE)
    assert blind.placed.tolist() == [False]
    assert [(r.pod, r.never) for r in kubelets.refusals] == [("trace/all8#0", True)]
    aware, kubelets = _run("aware", whole, Policy.SINGLE_NUMA_NODE)
    assert aware.placed.tolist() == [False] and kubelets.refusals == []


def test_best_effort_refuses_nothing() -> None:
    blind, kubelets = _run("blind", PODS, Policy.BEST_EFFORT)
    assert blind.placed.tolist() == [True, True, True]
    assert kubelets.refusals == []


def test_cpus_are_aligned_only_when_whole() -> None:
    # Each zone of a has 32 cores. A pod of 40 whole cores cannot have them from one zone; 40.5 cores are not
    # pinned (the shared pool), so only its GPU is aligned.
    whole, shared = PodSpec("whole", 40000, 1024, 1, 1000), PodSpec("shared", 40500, 1024, 1, 1000)
    blind, kubelets = _run("blind", [whole, shared], Policy.SINGLE_NUMA_NODE)
    assert blind.placed.tolist() == [False, True]
    assert [(r.pod, r.never) for r in kubelets.refusals] == [("trace/whole#0", True)]


def test_the_cache_counts_the_zones_as_the_kubelet_does() -> None:
    run, kubelets = _run("blind", PODS, Policy.SINGLE_NUMA_NODE)
    assert run.cache is not None
    for node in ("a", "b"):
        assert run.cache.numa.available(node) == kubelets.left[node]


def _trace(tmp_path: Path) -> list[str]:
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, ["a,64000,262144,8,G2", "b,64000,262144,8,G2"])
    pods = write(
        tmp_path / "pods.csv",
        MULTIGPU_HEADER,
        ["p3,4000,8192,3,1000", "q3,4000,8192,3,1000", "r2,2000,8192,2,1000", "s1,1000,1024,1,1000"],
    )
    return ["--nodes", str(nodes), "--pods", str(pods)]


def test_the_command_reports_the_refusals_of_each_blind_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    flags = ["--policy", "binpack,fgd", "--seeds", "1-2", "--numa", "single-numa-node", "--json", str(out)]
    assert cli.main(["simulate", "--quiet", *_trace(tmp_path), *flags]) == 0
    printed = capsys.readouterr().out
    assert "NUMA zones, Topology Manager policy single-numa-node: 2 zones on 2 (the default rule)" in printed
    data = json.loads(out.read_text())
    assert list(data["results"]) == ["binpack", "binpack numa-blind", "fgd", "fgd numa-blind"]
    assert data["numa"]["policy"] == "single-numa-node"
    assert data["numa"]["nodes_by_zones"] == {"2": 2}
    for name in ("binpack", "fgd"):
        aware, blind = data["results"][name], data["results"][name + " numa-blind"]
        # The aware run never binds a pod the kubelet refuses; the blind run's refused pods are among its failed.
        assert aware["numa"]["refused_pods"] == 0
        assert set(blind["numa"]) == {"refused_pods", "refused_never_fit", "refused_gpu_pct"}
        assert blind["failed_pods"] >= blind["numa"]["refused_pods"]
        assert f"{name} numa-blind" in printed


def test_numa_none_runs_the_simulator_without_zones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    flags = ["--policy", "binpack", "--seeds", "1", "--numa", "none", "--json", str(out)]
    assert cli.main(["simulate", "--quiet", *_trace(tmp_path), *flags]) == 0
    assert "NUMA" not in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert list(data["results"]) == ["binpack"]
    assert "numa" not in data and "numa" not in data["results"]["binpack"]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--numa", "strict"], "field --numa: unknown Topology Manager policy 'strict'"),
        (["--replay", "--numa", "restricted"], "field --numa: does not apply to --replay"),
        (["--scenario", "gangs", "--numa", "restricted"], "field --numa: does not apply to --scenario gangs"),
    ],
)
def test_a_bad_numa_flag_is_refused(
    flags: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["simulate", "--quiet", *_trace(tmp_path), *flags]) == 2
    assert says in " ".join(capsys.readouterr().err.split())
