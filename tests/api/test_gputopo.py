"""GPU topology inside a node: the annotation, nvidia-smi matrices (good and garbled), and device choice."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import gputopo, nvidia_smi
from scheduler.api.devices.gputopo import Gpu, GpuTopology, Link

DATA = Path(__file__).resolve().parent / "data" / "nvidia-smi"
FIELD = "metadata.annotations[gpusched.io/gpu-topology]"


def sample(name: str) -> str:
    return (DATA / name).read_text()


NVSWITCH = nvidia_smi.read(sample("hgx-h100-nvswitch.txt"))
PCIE = nvidia_smi.read(sample("pcie-l40s-2numa.txt"))
PAIRS = nvidia_smi.read(sample("nvlink-pairs-4gpu.txt"))


# --- nvidia-smi topo -m ----------------------------------------------------------------------------------------


def test_an_nvswitch_node_is_all_nvlink_with_pcie_switches_seen_through_the_nics() -> None:
    assert len(NVSWITCH) == 8
    assert NVSWITCH.gpus[0] == Gpu(0, numa=0, pcie="pcie0", nvlink=tuple((peer, 18) for peer in range(1, 8)))
    assert [gpu.numa for gpu in NVSWITCH.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [gpu.pcie for gpu in NVSWITCH.gpus] == [
        "pcie0",
        "pcie0",
        "pcie1",
        "pcie1",
        "pcie2",
        "pcie2",
        "pcie3",
        "pcie3",
    ]
    assert (NVSWITCH.link + 4 * (NVSWITCH.link == 0) == Link.NVLINK).all()
    assert NVSWITCH.groups[0] == gputopo.TightGroup(Link.NVLINK, tuple(range(8)))


def test_a_pcie_node_over_two_numa_nodes() -> None:
    assert json.loads(gputopo.to_annotation(PCIE)) == {
        "version": 1,
        "gpus": [
            {"index": 0, "numa": 0, "pcie": "pcie0"},
            {"index": 1, "numa": 0, "pcie": "pcie0"},
            {"index": 2, "numa": 0, "pcie": "pcie1"},
            {"index": 3, "numa": 0, "pcie": "pcie1"},
            {"index": 4, "numa": 1, "pcie": "pcie2"},
            {"index": 5, "numa": 1, "pcie": "pcie2"},
            {"index": 6, "numa": 1, "pcie": "pcie3"},
            {"index": 7, "numa": 1, "pcie": "pcie3"},
        ],
    }
    assert PCIE.link[0].tolist() == [0, Link.PCIE, Link.NUMA, Link.NUMA] + [Link.SYSTEM] * 4
    assert [(group.link, group.gpus) for group in PCIE.groups] == [
        (Link.PCIE, (0, 1)),
        (Link.PCIE, (2, 3)),
        (Link.PCIE, (4, 5)),
        (Link.PCIE, (6, 7)),
        (Link.NUMA, (0, 1, 2, 3)),
        (Link.NUMA, (4, 5, 6, 7)),
        (Link.SYSTEM, tuple(range(8))),
    ]


def test_a_node_with_nvlink_pairs() -> None:
    assert gputopo.to_annotation(PAIRS) == (
        '{"version":1,"gpus":[{"index":0,"numa":0,"nvlink":{"1":2}},{"index":1,"numa":0,"nvlink":{"0":2}},'
        '{"index":2,"numa":1,"nvlink":{"3":2}},{"index":3,"numa":1,"nvlink":{"2":2}}]}'
    )
    assert PAIRS.nvlinks.tolist() == [[0, 2, 0, 0], [2, 0, 0, 0], [0, 0, 0, 2], [0, 0, 2, 0]]


def test_pasted_matrices_with_spaces_crlf_and_text_around_them_are_read_alike() -> None:
    text = sample("nvlink-pairs-4gpu.txt")
    spaced = "$ nvidia-smi topo -m\r\n" + text.replace("\t", "    ").replace("\n", "\r\n")
    assert nvidia_smi.read(spaced) == PAIRS
    no_legend = text.split("Legend:")[0]
    assert nvidia_smi.read(no_legend) == PAIRS


def test_an_old_driver_matrix_with_soc_and_cpu_affinity_only() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-11\nGPU1\tSOC\t X \t12-23\n"
    topo = nvidia_smi.read(text)
    assert topo == GpuTopology((Gpu(0), Gpu(1)))
    assert topo.link[0, 1] == Link.SYSTEM


def test_numa_affinity_of_several_nodes_or_na_is_unknown() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\tN/A\nGPU1\tPHB\t X \t0-63\t0-1\n"
    assert [gpu.numa for gpu in nvidia_smi.read(text).gpus] == [-1, -1]


def garble(name: str, line: int, old: str, new: str) -> str:
    lines = sample(name).split("\n")
    assert old in lines[line - 1], lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        (garble("pcie-l40s-2numa.txt", 3, "PIX\t X \t", "PIX\t"), "line 3", "12 fields; expected 13"),
        (garble("pcie-l40s-2numa.txt", 3, "NODE", "NODE\tNODE"), "line 3", "14 fields; expected 13"),
        (garble("pcie-l40s-2numa.txt", 4, "NODE", "NVX"), "line 4", "unknown entry 'NVX'"),
        (garble("pcie-l40s-2numa.txt", 4, "NODE", "FOO"), "line 4", "unknown entry 'FOO'"),
        (garble("pcie-l40s-2numa.txt", 4, "NODE", "X"), "line 4", "X must be on the diagonal only"),
        (garble("pcie-l40s-2numa.txt", 4, " X ", "PIX"), "line 4", "the diagonal must be X"),
        (garble("pcie-l40s-2numa.txt", 1, "GPU0", "GPUO"), "", "no header line starting with GPU0"),
        ("Failed to initialize NVML: Driver/library version mismatch\n", "", "no header line"),
        ("", "", "no header line"),
        (garble("pcie-l40s-2numa.txt", 9, "GPU7\t", "GPU6\t"), "line 9", "a second row for GPU6"),
        (garble("pcie-l40s-2numa.txt", 9, "GPU7\t", "GPU9\t"), "line 9", "GPU9, which has no column"),
        (garble("pcie-l40s-2numa.txt", 9, "GPU7\t", "gpu7\t"), "", "no row for GPU7"),
        (garble("pcie-l40s-2numa.txt", 2, "PIX", "NODE"), "line 3", "GPU0 -> GPU1 is NODE but GPU1 -> GPU0 is PIX"),
        (garble("nvlink-pairs-4gpu.txt", 2, "NV2", "NV4"), "line 3", "NV4 but GPU1 -> GPU0 is NV2"),
        (garble("pcie-l40s-2numa.txt", 5, "0-31,64-95\t0", "0-31,64-95\t1"), "line 5", "NUMA Affinity is 0 and 1"),
        (garble("pcie-l40s-2numa.txt", 5, "0-31,64-95\t0", "0-31,64-95\tzero"), "line 5", "'zero' is not a NUMA"),
        (garble("pcie-l40s-2numa.txt", 1, "NUMA Affinity", "NUMA Affinity\tFan"), "line 1", "unexpected column"),
    ],
)
def test_garbled_nvidia_smi_output_is_refused_with_the_line(text: str, where: str, words: str) -> None:
    with pytest.raises(InvalidObject) as error:
        nvidia_smi.read(text, source="topo.txt")
    assert error.value.obj == (f"topo.txt {where}" if where else "topo.txt")
    assert words in error.value.reason


def test_gpus_sharing_a_switch_only_through_each_other_are_refused() -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tPIX\tNODE\t0-7\t0\n"
        "GPU1\tPIX\t X \tPIX\t0-7\t0\n"
        "GPU2\tNODE\tPIX\t X \t0-7\t0\n"
    )
    with pytest.raises(InvalidObject, match="share a PCIe switch through other devices, but are NODE apart"):
        nvidia_smi.read(text)


# --- the annotation --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("topo", [NVSWITCH, PCIE, PAIRS, GpuTopology.uniform(3)])
def test_annotation_round_trip(topo: GpuTopology) -> None:
    text = gputopo.to_annotation(topo)
    assert gputopo.parse_gpu_topology(text) == topo
    assert gputopo.to_annotation(gputopo.parse_gpu_topology(text)) == text


def test_a_hand_written_annotation_with_bus_ids_in_any_order() -> None:
    text = json.dumps(
        {
            "gpus": [
                {"index": 1, "numa": 0, "pcie": "0000:1a", "nvlink": {"0": 4}},
                {"index": 0, "numa": 0, "pcie": "0000:1a", "nvlink": {"1": 4}},
                {"index": 2, "numa": None},
            ]
        }
    )
    topo = gputopo.parse_gpu_topology(text, node="gpu-7")
    assert topo.gpus == (
        Gpu(0, 0, "0000:1a", ((1, 4),)),
        Gpu(1, 0, "0000:1a", ((0, 4),)),
        Gpu(2, -1, "", ()),
    )
    assert gputopo.parse_gpu_topology(gputopo.to_annotation(topo)) == topo


def gpus(*entries: dict[str, Any]) -> str:
    return json.dumps({"gpus": list(entries)})


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("{gpus: []}", "", "not JSON"),
        ("[]", "", "must be a JSON object"),
        ("{}", ".gpus", "at least one GPU"),
        ('{"gpus": [], "version": 1}', ".gpus", "at least one GPU"),
        ('{"gpus": [{"index": 0}], "version": 2}', ".version", "only version 1"),
        ('{"gpus": [{"index": 0}], "gpu": 1}', "", "unknown keys ['gpu']"),
        (gpus({"index": 0, "nvlinks": {}}), ".gpus[0]", "unknown keys ['nvlinks']"),
        (gpus({"numa": 0}), ".gpus[0].index", "None is not a GPU index"),
        (gpus({"index": True}), ".gpus[0].index", "True is not a GPU index"),
        (gpus({"index": 0}, {"index": 0}), ".gpus[1].index", "each once; found 0"),
        (gpus({"index": 0}, {"index": 2}), ".gpus[1].index", "0..1, each once; found 2"),
        (gpus({"index": 0, "numa": -1}), ".gpus[0].numa", "-1 is not a NUMA node"),
        (gpus({"index": 0, "numa": "0"}), ".gpus[0].numa", "'0' is not a NUMA node"),
        (gpus({"index": 0, "pcie": 3}), ".gpus[0].pcie", "not a PCIe switch id"),
        (gpus({"index": 0, "nvlink": [1]}), ".gpus[0].nvlink", "must be an object"),
        (gpus({"index": 0, "nvlink": {"one": 2}}), ".gpus[0].nvlink", "'one' is not a GPU index"),
        (gpus({"index": 0, "nvlink": {"1": 0}}, {"index": 1}), ".gpus[0].nvlink.1", "0 is not a number of NVLinks"),
        (gpus({"index": 0, "nvlink": {"0": 2}}), ".gpus[0].nvlink.0", "GPU 0 cannot have NVLinks to GPU 0"),
        (gpus({"index": 0, "nvlink": {"5": 2}}), ".gpus[0].nvlink.5", "cannot have NVLinks to GPU 5"),
        (
            gpus({"index": 1, "nvlink": {"0": 2}}, {"index": 0, "nvlink": {"1": 1}}),
            ".gpus[1].nvlink.1",
            "GPU 0 has 1 NVLinks to GPU 1, but GPU 1 has 2 back",
        ),
        (
            gpus({"index": 0, "numa": 0, "pcie": "s"}, {"index": 1, "numa": 1, "pcie": "s"}),
            ".gpus[1].numa",
            "share PCIe switch 's' but sit on NUMA nodes 0 and 1",
        ),
    ],
)
def test_a_bad_annotation_is_refused_naming_the_annotation_and_field(text: str, field: str, words: str) -> None:
    with pytest.raises(InvalidObject) as error:
        gputopo.parse_gpu_topology(text, node="gpu-7")
    assert error.value.obj == "node gpu-7"
    assert error.value.field == FIELD + field
    assert words in error.value.reason


def test_the_graph_is_a_networkx_graph_and_its_nvlink_cliques_are_the_tight_groups() -> None:
    for topo in (NVSWITCH, PCIE, PAIRS, DGX1):
        graph = nx.Graph(topo.adjacency())
        n = len(topo)
        assert graph.number_of_nodes() == n
        assert graph.number_of_edges() == n * (n - 1) // 2
        assert graph[0][1]["weight"] == topo.link[0, 1]
        nvlink = nx.Graph([(a, b) for a, b, weight in graph.edges(data="weight") if weight == Link.NVLINK])
        cliques = sorted(tuple(sorted(c)) for c in nx.find_cliques(nvlink))
        assert cliques == sorted(group.gpus for group in topo.groups if group.link is Link.NVLINK)


# --- device choice ---------------------------------------------------------------------------------------------

#: DGX-1 (V100) hybrid cube-mesh: two fully linked quads (NV1 and NV2 links) joined GPU i <-> GPU i+4.
DGX1_LINKS = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (1, 2): 2, (1, 3): 1, (2, 3): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 1,
    (0, 4): 2, (1, 5): 2, (2, 6): 2, (3, 7): 2,
}  # fmt: skip
DGX1 = GpuTopology.of(
    Gpu(
        i,
        numa=i // 4,
        nvlink=tuple(sorted((b if a == i else a, n) for (a, b), n in DGX1_LINKS.items() if i in (a, b))),
    )
    for i in range(8)
)


def test_two_gpus_on_the_pairs_node_go_to_an_nvlink_pair() -> None:
    assert gputopo.tightest_set(PAIRS, [0, 1, 2, 3], 2) == (0, 1)
    assert gputopo.tightest_set(PAIRS, [0, 2, 3], 2) == (2, 3)
    assert gputopo.tightest_set(PAIRS, [1, 2], 2) == (1, 2)  # nothing better is free


def test_a_one_gpu_pod_takes_the_lone_gpu_and_leaves_the_free_nvlink_pair() -> None:
    assert gputopo.tightest_set(PAIRS, [0, 1, 2], 1) == (2,)
    assert gputopo.fragmentation_cost(PAIRS, [0, 1, 2], [2]) == ()
    assert gputopo.fragmentation_cost(PAIRS, [0, 1, 2], [0]) == (2,)


def test_four_gpus_on_the_pcie_node_stay_on_one_numa_node() -> None:
    assert gputopo.tightest_set(PCIE, range(8), 4) == (0, 1, 2, 3)
    # NUMA node 0 has three free GPUs left: the pod goes whole to NUMA node 1.
    assert gputopo.tightest_set(PCIE, [1, 2, 3, 4, 5, 6, 7], 4) == (4, 5, 6, 7)
    assert gputopo.set_tightness(PCIE, (4, 5, 6, 7)).min_link == Link.NUMA
    assert gputopo.set_tightness(PCIE, (1, 2, 3, 4)).min_link == Link.SYSTEM


def test_small_pods_on_the_pcie_node_fill_broken_groups_first() -> None:
    assert gputopo.tightest_set(PCIE, [1, 2, 3, 4, 5, 6, 7], 1) == (1,)
    assert gputopo.tightest_set(PCIE, [1, 3, 4, 5, 6, 7], 2) == (4, 5)  # a whole free switch
    assert gputopo.tightest_set(PCIE, [1, 2, 3, 5, 6, 7], 2) == (2, 3)


def test_on_the_nvswitch_node_single_gpus_keep_pcie_pairs_and_numa_nodes_whole() -> None:
    free = list(range(8))
    taken: list[int] = []
    for _ in range(4):
        (gpu,) = gputopo.tightest_set(NVSWITCH, free, 1)
        free.remove(gpu)
        taken.append(gpu)
    assert taken == [0, 1, 2, 3]  # NUMA node 1 stays whole for a 4-GPU pod
    # the node's NVLink clique, NUMA node 0, switch pcie0
    assert gputopo.fragmentation_cost(NVSWITCH, range(8), [0]) == (8, 4, 2)
    assert gputopo.fragmentation_cost(NVSWITCH, [1, 2, 3, 4, 5, 6, 7], [1]) == ()
    assert gputopo.fragmentation_cost(NVSWITCH, range(8), range(8)) == ()


def test_more_nvlinks_win_among_nvlink_sets_on_the_dgx1_mesh() -> None:
    # NV2 pairs: (0, 4) takes a whole 2-clique but breaks both quads; (0, 3) breaks one quad and two 2-cliques.
    assert gputopo.fragmentation_cost(DGX1, range(8), (0, 4)) == (8, 4, 4)
    assert gputopo.fragmentation_cost(DGX1, range(8), (0, 3)) == (8, 4, 2, 2)
    assert gputopo.tightest_set(DGX1, range(8), 2) == (0, 3)
    assert gputopo.tightest_set(DGX1, range(8), 4) == (0, 1, 2, 3)
    assert gputopo.tightest_set(DGX1, [1, 2, 3, 5, 6, 7], 3) == (1, 2, 3)
    assert gputopo.set_tightness(DGX1, (0, 1, 2, 3)) == (Link.NVLINK, 6 * Link.NVLINK, 1, 8)


def test_a_uniform_node_fills_the_lowest_free_indices() -> None:
    assert gputopo.tightest_set(GpuTopology.uniform(4), [3, 1, 2], 2) == (1, 2)
    assert gputopo.tightest_set(GpuTopology.uniform(4), [], 0) == ()


def test_bad_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="3 GPUs asked for; 2 free"):
        gputopo.tightest_set(PAIRS, [0, 1], 3)
    with pytest.raises(ValueError, match="listed twice"):
        gputopo.tightest_set(PAIRS, [0, 0], 1)
    with pytest.raises(ValueError, match=r"outside 0\.\.3"):
        gputopo.tightest_set(PAIRS, [4], 1)
    with pytest.raises(ValueError, match="not free"):
        gputopo.fragmentation_cost(PAIRS, [0, 1], [2])


@pytest.mark.parametrize("topo", [NVSWITCH, PCIE, PAIRS, DGX1])
def test_greedy_finds_the_exact_choice_on_the_sample_nodes(topo: GpuTopology) -> None:
    for free in ([*range(len(topo))], [1, 2, 3, 5, 6, 7][: len(topo) - 1]):
        for k in range(1, len(free) + 1):
            exact = gputopo.tightest_set(topo, free, k)
            greedy = gputopo.tightest_set(topo, free, k, exact_limit=0)
            assert gputopo.set_tightness(topo, greedy) == gputopo.set_tightness(topo, exact), (free, k)


def test_an_answer_is_remembered_per_topology_and_question(monkeypatch: pytest.MonkeyPatch) -> None:
    computed: list[tuple[int, ...]] = []
    compute = gputopo._tightest_set

    def counting(topo: GpuTopology, free: Any, k: int, exact_limit: int) -> tuple[int, ...]:
        computed.append(tuple(free))
        return compute(topo, free, k, exact_limit)

    monkeypatch.setattr(gputopo, "_tightest_set", counting)
    monkeypatch.setattr(gputopo, "_TIGHTEST", {})
    first = gputopo.tightest_set(PCIE, [1, 2, 3, 5, 6, 7], 2)
    assert gputopo.tightest_set(PCIE, [1, 2, 3, 5, 6, 7], 2) == first and len(computed) == 1
    # Another question, or the same of another topology (an equal one read again), is computed.
    gputopo.tightest_set(PCIE, [1, 2, 3, 5, 6, 7], 3)
    again = nvidia_smi.read(sample("pcie-l40s-2numa.txt"))
    assert gputopo.tightest_set(again, [1, 2, 3, 5, 6, 7], 2) == first and len(computed) == 3
    monkeypatch.setattr(gputopo, "_TIGHTEST_KEPT", 3)
    gputopo.tightest_set(PAIRS, [0, 1], 1)  # a fourth: the memo starts over rather than grow
    assert len(gputopo._TIGHTEST) == 1


# --- the exact choice against a slow twin ----------------------------------------------------------------------


def pair_link(a: Gpu, b: Gpu) -> tuple[int, int]:
    """The link and NVLink count between two GPUs, straight from their attributes."""
    links = dict(a.nvlink).get(b.index, 0)
    if links:
        return Link.NVLINK, links
    if a.pcie and a.pcie == b.pcie:
        return Link.PCIE, 0
    if a.numa >= 0 and a.numa == b.numa:
        return Link.NUMA, 0
    return Link.SYSTEM, 0


def slow_choice(topo: GpuTopology, free: list[int], k: int) -> tuple[int, ...]:
    groups = [set(group.gpus) for group in topo.groups if set(group.gpus) <= set(free)]

    def key(chosen: tuple[int, ...]) -> tuple[object, ...]:
        pairs = [pair_link(topo.gpus[a], topo.gpus[b]) for a, b in itertools.combinations(chosen, 2)]
        links = [link for link, _ in pairs] or [Link.NVLINK]
        nvlinks = [count for _, count in pairs] or [0]
        broken = sorted((len(group) for group in groups if 0 < len(group & set(chosen)) < len(group)), reverse=True)
        return (-min(links), -sum(links), -min(nvlinks), -sum(nvlinks), tuple(broken), chosen)

    return min(itertools.combinations(sorted(free), k), key=key)


@st.composite
def topologies(draw: st.DrawFn) -> GpuTopology:
    n = draw(st.integers(1, 7))
    links = {(a, b): draw(st.sampled_from([0, 0, 1, 2, 12])) for a, b in itertools.combinations(range(n), 2)}
    numa = [draw(st.sampled_from([-1, 0, 1])) for _ in range(n)]
    # A switch sits on one NUMA node: the switch id carries it.
    pcie = [f"{switch}@{numa[i]}" if (switch := draw(st.sampled_from(["", "s0", "s1"]))) else "" for i in range(n)]
    return GpuTopology.of(
        Gpu(
            i,
            numa[i],
            pcie[i],
            tuple(sorted((b if a == i else a, c) for (a, b), c in links.items() if c and i in (a, b))),
        )
        for i in range(n)
    )


@settings(max_examples=300, deadline=None)
@given(topologies(), st.data())
def test_the_choice_is_the_slow_twins_choice(topo: GpuTopology, data: st.DataObject) -> None:
    free = sorted(data.draw(st.sets(st.integers(0, len(topo) - 1), min_size=1)))
    k = data.draw(st.integers(1, len(free)))
    assert gputopo.tightest_set(topo, free, k) == slow_choice(topo, free, k)
    assert gputopo.parse_gpu_topology(gputopo.to_annotation(topo)) == topo


def test_a_32_gpu_node_is_chosen_greedily_and_a_pod_gets_one_whole_nvlink_domain() -> None:
    domains = [range(start, start + 8) for start in range(0, 32, 8)]
    big = GpuTopology.of(
        Gpu(i, numa=i // 16, nvlink=tuple((peer, 18) for peer in domain if peer != i))
        for domain in domains
        for i in domain
    )
    free = list(range(1, 32))
    assert math.comb(len(free), 8) > gputopo.EXACT_LIMIT
    assert gputopo.tightest_set(big, free, 8) == tuple(range(8, 16))
    assert gputopo.tightest_set(big, free, 3) == (1, 2, 3)  # exact: C(31, 3) sets; fills the broken domain
