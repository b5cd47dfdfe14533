"""``gpusched simulate --snapshot``: the operator's config files and Queue objects compared on an exported cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler import cli
from scheduler.api.basics.errors import InvalidObject
from scheduler.sim import snapshot

BINPACK = "profile:\n  plugins: [fit, gpu, binpack]\n"
SPREAD = "profile:\n  plugins: [fit, gpu, spread]\n"
QUEUES = """\
apiVersion: scheduling.gpusched.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec: {weight: 1}
---
apiVersion: scheduling.gpusched.io/v1alpha1
kind: Queue
metadata: {name: team-b}
spec: {weight: 1}
"""
#: team-b may hold 1 GPU at most.
QUEUES_LIMITED = QUEUES.replace(
    "metadata: {name: team-b}\nspec: {weight: 1}",
    'metadata: {name: team-b}\nspec: {weight: 1, limit: {nvidia.com/gpu: "1"}}',
)


def _node(name: str, gpus: int) -> dict[str, Any]:
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


def _pod(name: str, gpus: int, *, queue: str, node: str = "", created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpusched",
        "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"gpusched.io/queue": queue},
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def write_snapshot(folder: Path) -> Path:
    """Two 4-GPU nodes; team-a runs 2 GPUs on node-a; pending: team-b 2 GPUs, then team-a 4 GPUs."""
    document = {
        "format": snapshot.FORMAT,
        "taken": "2026-01-01T00:10:00Z",
        "hashedNames": False,
        "nodes": [_node("node-a", 4), _node("node-b", 4)],
        "pods": [
            _pod("running", 2, queue="team-a", node="node-a"),
            _pod("small", 2, queue="team-b", created="2026-01-01T00:01:00Z"),
            _pod("large", 4, queue="team-a", created="2026-01-01T00:02:00Z"),
        ],
        "podGroups": [],
        "queues": [],
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / snapshot.FILE_NAME).write_text(json.dumps(document))
    return folder


def test_load_reads_the_pods_on_nodes_and_the_pending_ones_oldest_first(tmp_path: Path) -> None:
    taken = snapshot.load(write_snapshot(tmp_path / "snap"))
    assert [n.name for n in taken.nodes] == ["node-a", "node-b"]
    assert taken.gpus == 8
    assert [p.name for p in taken.bound] == ["running"]
    assert [p.name for p in taken.pending] == ["small", "large"]


def test_packing_places_what_spreading_strands(tmp_path: Path) -> None:
    """Spreading puts the 2-GPU pod on the empty node, and the 4-GPU pod finds no node; packing places both."""
    taken = snapshot.load(write_snapshot(tmp_path / "snap"))
    (tmp_path / "q.yaml").write_text(QUEUES)
    queues = snapshot.load_queues([tmp_path / "q.yaml"])
    configs = [
        snapshot.Settings("spread", _profile(tmp_path, SPREAD)),
        snapshot.Settings("binpack", _profile(tmp_path, BINPACK)),
    ]
    results = snapshot.compare(taken, configs, queues)
    assert results["binpack"]["placed_pods"] == 2
    assert results["binpack"]["gpu_allocation"] == pytest.approx(100.0)
    assert results["spread"]["placed"] == ["ml/small"]
    assert results["spread"]["queues"]["team-a"] == {
        "pending_pods": 1,
        "pending_gpus": 4.0,
        "placed_pods": 0,
        "placed_gpus": 0.0,
    }


def _profile(folder: Path, text: str) -> Any:
    from scheduler.k8s import config as k8s_config

    path = folder / f"{abs(hash(text))}.yaml"
    path.write_text(text)
    return k8s_config.load(path).profile


def test_the_command_prints_both_configs_and_the_queues_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_snapshot(tmp_path / "snap")
    (tmp_path / "current.yaml").write_text(SPREAD)
    (tmp_path / "candidate.yaml").write_text(BINPACK)
    (tmp_path / "queues.yaml").write_text(QUEUES_LIMITED)
    out = tmp_path / "out.json"
    argv = ["simulate", "--snapshot", str(folder), "--config", str(tmp_path / "current.yaml")]
    argv += [
        "--config",
        str(tmp_path / "candidate.yaml"),
        "--queues",
        str(tmp_path / "queues.yaml"),
        "--json",
        str(out),
    ]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 nodes, 8 GPUs" in printed and "2 pending for gpusched" in printed
    assert "current" in printed and "candidate" in printed
    results = json.loads(out.read_text())["results"]
    # team-b's limit (1 GPU) keeps its 2-GPU pod pending under both configs, so node-b stays free for team-a's.
    assert results["current"]["placed"] == results["candidate"]["placed"] == ["ml/large"]
    assert "team-b" in printed and "0/1 pods, 0/2 GPUs" in printed


def test_options_of_a_snapshot_run_are_refused_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--config", "x.yaml"]) == 2
    assert "--config" in capsys.readouterr().err


def test_queue_files_must_hold_queues(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(InvalidObject, match="not a Queue"):
        snapshot.load_queues([path])
    path.write_text(QUEUES + "---\n" + QUEUES.split("---")[0])
    with pytest.raises(InvalidObject, match="given twice"):
        snapshot.load_queues([path])


def test_a_file_that_is_not_a_snapshot_is_refused(tmp_path: Path) -> None:
    (tmp_path / snapshot.FILE_NAME).write_text('{"nodes": []}')
    with pytest.raises(InvalidObject, match="not a snapshot"):
        snapshot.load(tmp_path)


def test_a_higher_priority_pod_preempts_and_the_eviction_is_counted(tmp_path: Path) -> None:
    """The default profile preempts: a full node's low-priority pod gives way to a pending one of higher priority."""
    urgent = _pod("urgent", 4, queue="team-a", created="2026-01-01T00:05:00Z")
    urgent["spec"]["priority"] = 1000
    document = {
        "format": snapshot.FORMAT,
        "nodes": [_node("node-a", 4)],
        "pods": [_pod("batch", 4, queue="team-a", node="node-a"), urgent],
    }
    (tmp_path / snapshot.FILE_NAME).write_text(json.dumps(document))
    (tmp_path / "q.yaml").write_text(QUEUES)
    from scheduler.k8s import config as k8s_config

    default = snapshot.settings_of("default.yaml", k8s_config.load(None))
    result = snapshot.run(snapshot.load(tmp_path), default, snapshot.load_queues([tmp_path / "q.yaml"]))
    assert result["placed"] == ["ml/urgent"]
    assert (result["evicted_pods"], result["evicted_gpus"]) == (1, 4.0)
    assert result["gpu_allocation"] == pytest.approx(100.0)


def test_refusals_name_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_snapshot(tmp_path / "snap")
    assert cli.main(["simulate", "--snapshot", str(folder), "--policy", "fgd"]) == 2
    assert "--policy: does not apply to --snapshot" in capsys.readouterr().err
    assert cli.main(["simulate", "--snapshot", str(tmp_path / "missing")]) == 2
    assert "gpusched snapshot --out DIR writes one" in capsys.readouterr().err
    assert cli.main(["simulate", "--snapshot", str(folder), "--config", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml" in capsys.readouterr().err


def test_an_unreadable_pod_is_left_out_and_named(tmp_path: Path) -> None:
    bad = _pod("bad", 1, queue="team-a")
    bad["spec"]["priority"] = "high"
    folder = write_snapshot(tmp_path / "snap")
    document = json.loads((folder / snapshot.FILE_NAME).read_text())
    document["pods"].append(bad)
    (folder / snapshot.FILE_NAME).write_text(json.dumps(document))
    taken = snapshot.load(folder)
    assert [p.name for p in taken.pending] == ["small", "large"]
    assert "left out pod ml/bad" in snapshot.describe(taken) and "spec.priority" in snapshot.describe(taken)


def _with(folder: Path, *, nodes: list[dict[str, Any]] = [], pods: list[dict[str, Any]] = []) -> Path:  # noqa: B006
    document = json.loads((folder / snapshot.FILE_NAME).read_text())
    document["nodes"] += nodes
    document["pods"] += pods
    (folder / snapshot.FILE_NAME).write_text(json.dumps(document))
    return folder


def _spread_and_binpack(
    tmp_path: Path, taken: snapshot.Snapshot, *, own_queues: bool = False
) -> dict[str, dict[str, Any]]:
    """Both configs with QUEUES (``own_queues``: with the snapshot's Queues)."""
    (tmp_path / "q.yaml").write_text(QUEUES)
    configs = [
        snapshot.Settings("spread", _profile(tmp_path, SPREAD)),
        snapshot.Settings("binpack", _profile(tmp_path, BINPACK)),
    ]
    return snapshot.compare(taken, configs, None if own_queues else snapshot.load_queues([tmp_path / "q.yaml"]))


def test_nodes_taken_while_not_ready_place_nothing_and_the_first_line_says_why(tmp_path: Path) -> None:
    """A node is tainted node.kubernetes.io/not-ready from its creation until the node lifecycle controller sees it
    Ready, a moment later (longer after an API server restart): a snapshot taken then places nothing there, as
    gpusched run would not; the output names the taint, so that nobody reads it as the config's doing."""
    folder = write_snapshot(tmp_path / "snap")
    document = json.loads((folder / snapshot.FILE_NAME).read_text())
    for node in document["nodes"]:
        node["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    (folder / snapshot.FILE_NAME).write_text(json.dumps(document))
    taken = snapshot.load(folder)
    results = _spread_and_binpack(tmp_path, taken)
    assert results["spread"]["placed"] == results["binpack"]["placed"] == []
    said = snapshot.describe(taken)
    assert "node.kubernetes.io/not-ready on 2" in said and "take the snapshot again" in said
    assert "not-ready" not in snapshot.describe(snapshot.load(write_snapshot(tmp_path / "ready")))


def test_the_rest_of_a_whole_cluster_leaves_the_comparison_of_its_pods_as_it_was(tmp_path: Path) -> None:
    """A whole-cluster export holds other teams' nodes and pods: a tainted node, a full node of another scheduler's
    pods, a pod bound to a node that is gone, pending pods of unknown queues and of other schedulers, other teams'
    Queues (one guaranteed more GPUs than the cluster has, one whose parent is gone). Pinned to their own nodes, the
    test's pods are placed as in a snapshot of their own."""
    alone = _spread_and_binpack(tmp_path / "alone", snapshot.load(write_snapshot(tmp_path / "alone")))
    tainted = _node("tainted", 8)
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
    theirs = _pod("theirs", 8, queue="none", node="full")
    theirs["spec"]["schedulerName"] = "default-scheduler"
    waiting_elsewhere = _pod("other-scheduler", 1, queue="none")
    waiting_elsewhere["spec"]["schedulerName"] = "volcano"
    foreign = [
        _pod("gone", 2, queue="team-a", node="deleted-node"),
        _pod("unknown-queue", 1, queue="no-such-queue", created="2025-01-01T00:00:00Z"),
        _pod("too-big", 64, queue="team-b", created="2025-01-01T00:00:00Z"),
        theirs,
        waiting_elsewhere,
    ]
    folder = _with(write_snapshot(tmp_path / "whole"), nodes=[tainted, _node("full", 8)], pods=foreign)
    document = json.loads((folder / snapshot.FILE_NAME).read_text())
    for pod in document["pods"]:
        if pod["metadata"]["name"] in ("small", "large"):
            pod["spec"]["nodeSelector"] = {"pool": "mine"}
    for node in document["nodes"]:
        if node["metadata"]["name"] in ("node-a", "node-b"):
            node["metadata"]["labels"]["pool"] = "mine"
    document["queues"] = [
        *yaml.safe_load_all(QUEUES),
        {"kind": "Queue", "metadata": {"name": "big"}, "spec": {"guaranteed": {"nvidia.com/gpu": "100"}}},
        {"kind": "Queue", "metadata": {"name": "orphan"}, "spec": {"parent": "deleted-queue"}},
    ]
    (folder / snapshot.FILE_NAME).write_text(json.dumps(document))
    taken = snapshot.load(folder)
    assert taken.others_pending == 1 and "pod ml/gone" in taken.skipped
    for own_queues in (False, True):
        whole = _spread_and_binpack(tmp_path / "whole", taken, own_queues=own_queues)
        for config in ("spread", "binpack"):
            assert whole[config]["queues"]["team-a"] == alone[config]["queues"]["team-a"]
            mine = [key for key in whole[config]["placed"] if key in ("ml/small", "ml/large")]
            assert mine == alone[config]["placed"]
