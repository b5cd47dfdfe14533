"""A team's own settings compared on its own cluster: ``gpusched snapshot`` exports its part of the local control
plane (kwok nodes of a label, a running pod, the pending pods of its namespace, Queues), and ``gpusched simulate
--snapshot`` runs the current config and a candidate on it with the team's Queue objects, printing what each places.

No scheduler runs: the pending pods stay pending, as in a cluster whose team wonders what another config would do.
Two 4-GPU nodes; a 2-GPU pod runs on the first; pending, oldest first: team-b's 2-GPU pod, then team-a's 4-GPU
pod. Spreading (the current config) puts team-b's pod on the empty node and strands team-a's; packing (the
candidate) fills the first node and places both.

The suite shares one control plane among its tests, so the export is scoped (``--node-selector``, ``--namespace``):
a third node of the test, outside the selector, would hold team-a's pod under either config. And the nodes are
exported once the node lifecycle controller has taken off the ``node.kubernetes.io/not-ready`` taint every new node
starts with: Ready comes first, and after an API server restart (test_resilience_e2e.py, run just before in the
suite) the taint stayed on long enough for a snapshot to show both nodes out, where neither config placed anything.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e import kube as kube_mod

pytestmark = pytest.mark.e2e

CURRENT = "profile:\n  plugins: [fit, gpu, spread]\n"
CANDIDATE = "profile:\n  plugins: [fit, gpu, binpack]\n"
NOT_READY = "node.kubernetes.io/not-ready"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kube_mod.gpusched_command(), *args], capture_output=True, text=True, timeout=300, check=False
    )


def _gpusched(kube: kube_mod.Kube, *args: str) -> str:
    done = _run(*args)
    assert done.returncode == 0, f"gpusched {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_two_configs_with_queues_compared_on_an_exported_snapshot(
    kube: kube_mod.Kube, scenario: kube_mod.Scenario, tmp_path: Path
) -> None:
    owner = {kube_mod.OWNER_LABEL: scenario.name}
    # Names that stand only where names are hashed (the scenario's own name is also a label value, which is kept).
    first, second = f"snapshotted-{os.getpid()}-a", f"snapshotted-{os.getpid()}-b"
    pool = {"e2e.gpusched.io/pool": "snapshotted"}
    scenario.add_nodes(
        [
            kube_mod.gpu_node(first, gpus=4, labels=pool),
            kube_mod.gpu_node(second, gpus=4, labels=pool),
            kube_mod.gpu_node(f"{first}-out", gpus=8),
        ]
    )
    team_a, team_b = f"{scenario.name[:40]}-team-a", f"{scenario.name[:40]}-team-b"
    queues = [kube_mod.queue(team_a, weight=1), kube_mod.queue(team_b, weight=1)]
    for q in queues:
        scenario.create_queue(q)
    running = kube_mod.pod("running", gpus=2, queue=team_a)
    running["spec"]["nodeName"] = first
    scenario.create_pod(running)
    elsewhere = kube_mod.pod("elsewhere", gpus=1, queue=team_a)
    elsewhere["spec"]["nodeName"] = f"{first}-out"
    scenario.create_pod(elsewhere)
    scenario.wait_bound(["running", "elsewhere"])
    scenario.create_pod(kube_mod.pod("small", gpus=2, queue=team_b, node_selector=owner))
    scenario.create_pod(kube_mod.pod("large", gpus=4, queue=team_a, node_selector=owner))
    (tmp_path / "current.yaml").write_text(CURRENT)
    (tmp_path / "candidate.yaml").write_text(CANDIDATE)
    (tmp_path / "queues.yaml").write_text(yaml.safe_dump_all(queues))
    compare = ["--config", str(tmp_path / "current.yaml"), "--config", str(tmp_path / "candidate.yaml")]
    compare += ["--queues", str(tmp_path / "queues.yaml")]

    kube_mod.wait_until(
        lambda: not any(t["key"] == NOT_READY for n in scenario.my_nodes() for t in n["spec"].get("taints") or []),
        timeout=120,
        what=f"the node lifecycle controller to take {NOT_READY} off the new nodes",
    )
    scope = ["--node-selector", f"{kube_mod.OWNER_LABEL}={scenario.name},e2e.gpusched.io/pool=snapshotted"]
    scope += ["--namespace", scenario.namespace, "--kubeconfig", str(kube.kubeconfig)]

    said = _gpusched(kube, "snapshot", "--out", str(tmp_path / "snap"), *scope)
    assert f"wrote {tmp_path / 'snap' / 'snapshot.json'}: 2 nodes, 1 pods on nodes, 2 pending" in said
    exported = json.loads((tmp_path / "snap" / "snapshot.json").read_text())
    assert sorted(n["metadata"]["name"] for n in exported["nodes"]) == [first, second]
    assert {p["metadata"]["namespace"] for p in exported["pods"]} == {scenario.namespace}
    mine = {p["metadata"]["name"]: p for p in exported["pods"]}
    assert sorted(mine) == ["large", "running", "small"]  # "elsewhere" runs on the node left out
    assert mine["running"]["spec"]["nodeName"] == first and "nodeName" not in mine["large"]["spec"]
    assert {team_a, team_b} <= {q["metadata"]["name"] for q in exported["queues"]}

    table = _gpusched(
        kube, "simulate", "--snapshot", str(tmp_path / "snap"), *compare, "--json", str(tmp_path / "r.json")
    )
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    ns = scenario.namespace
    assert f"{ns}/small" in results["current"]["placed"] and f"{ns}/large" not in results["current"]["placed"]
    assert {f"{ns}/small", f"{ns}/large"} <= set(results["candidate"]["placed"])
    assert results["current"]["queues"][team_a]["placed_gpus"] == 0
    assert results["candidate"]["queues"][team_a]["placed_gpus"] == 4
    assert "current" in table and "candidate" in table and team_a in table

    # Without --queues the snapshot's own Queues are used: the same objects here, so the same outcome.
    own = compare[:4]
    _gpusched(kube, "simulate", "--snapshot", str(tmp_path / "snap"), *own, "--json", str(tmp_path / "own.json"))
    assert json.loads((tmp_path / "own.json").read_text())["results"]["candidate"]["queues"][team_a]["placed_gpus"] == 4

    # Names hashed: the nodes' and the namespace's names are nowhere in the file, and the comparison comes out the
    # same.
    _gpusched(kube, "snapshot", "--out", str(tmp_path / "hashed"), "--hash-names", *scope)
    text = (tmp_path / "hashed" / "snapshot.json").read_text()
    for name in (first, second, scenario.namespace):
        assert name not in text
    _gpusched(kube, "simulate", "--snapshot", str(tmp_path / "hashed"), *compare, "--json", str(tmp_path / "h.json"))
    hashed = json.loads((tmp_path / "h.json").read_text())["results"]
    for config in ("current", "candidate"):
        assert hashed[config]["queues"][team_a] == results[config]["queues"][team_a]
        assert hashed[config]["queues"][team_b] == results[config]["queues"][team_b]

    # A selector no node matches is said at once, not when the simulator finds an empty file.
    done = _run("snapshot", "--out", str(tmp_path / "none"), "--node-selector", "no=such", *scope[-2:])
    assert done.returncode != 0 and "no node matches 'no=such'" in done.stderr
    assert not (tmp_path / "none").exists()
