"""The topology scenario: a labelled cluster, required levels never broken with topology on, broken without it,
and the JSON shape ``gpusched simulate --scenario topology --json`` writes."""

from __future__ import annotations

import json
from pathlib import Path

from scheduler.api.crds import topology
from scheduler.api.devices import gputopo
from scheduler.sim import policies, report, scenario_runs
from scheduler.sim import topology as sim_topology

SMALL = {"blocks": 2, "racks": 2, "cliques": 2, "nodes": 4}


def test_the_cluster_is_labelled_and_annotated_as_docs_say() -> None:
    nodes = sim_topology.cluster(**SMALL)
    assert len(nodes) == 32
    first = nodes[0]
    assert first.labels[topology.LABEL_BLOCK] == "b0" and first.labels[topology.LABEL_CLIQUE] == "b0-r0-c0"
    topo = gputopo.parse_gpu_topology(first.annotations[gputopo.ANNOTATION])
    assert len(topo) == 8 and topo.groups[0].link == gputopo.Link.NVLINK and len(topo.groups[0].gpus) == 8


def test_required_levels_hold_with_topology_and_break_without() -> None:
    nodes = sim_topology.cluster(**SMALL)
    jobs = sim_topology.generate(80, cluster_gpus=256, seed=3)
    config = policies.build("default", shapes=[], seed=0)
    aware = sim_topology.run(nodes, jobs, config)
    ignored = sim_topology.run(nodes, jobs, config, ignore=True)
    assert aware.required_violations == 0
    assert ignored.required_violations > 0
    assert aware.one_domain_share > ignored.one_domain_share
    assert aware.placed_jobs == len(jobs)
    assert 0 < aware.gpu_allocation <= 100


def test_the_json_has_both_runs_with_the_documented_figures(tmp_path: Path) -> None:
    results = scenario_runs.run_topology([5], True, nodes=sim_topology.cluster(**SMALL), jobs_per_seed=40)
    out = tmp_path / "topo.json"
    report.write_json(str(out), {"mode": "topology", "seeds": [5], "results": results})
    written = json.loads(out.read_text())["results"]
    assert set(written) == {"topology", "ignored"}
    for figures in written.values():
        assert {"one_domain_share", "required_violations", "free_cliques_mean", "gpu_allocation"} <= set(figures)
    assert written["topology"]["required_violations"] == 0
    table = sim_topology.table(results)
    assert "required violations" in table and table.count("\n") == 3
