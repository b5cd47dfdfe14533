"""The examples users copy, applied as written: every YAML object in docs/, README.md and examples/, the kind
example run end to end through ``gpusched run``, and every example workload of examples/ scheduled on the kind
walkthrough's nodes as shipped (its fake GPU nodes, taint included, and its queues).

An example that the API server refuses, or that gpusched does not schedule as its text says, is a defect users
meet first; these tests keep docs and code from drifting apart (docs said `q` where the short name is `gq`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.core.extension_points import Framework
from scheduler.k8s import config as k8s_config
from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
#: Cluster configs of kind and k3d, and kustomizations (examples/registry-overlay): not Kubernetes objects.
NOT_OBJECTS = ("kind.x-k8s.io", "k3d.io", "kustomize.config.k8s.io")
#: The gpusched config file's sections (docs/operator.md): a YAML block with one of these on top is a config.
CONFIG_SECTIONS = ("profile", "binding", "backoff", "reservations", "leaderElection")


def _blocks() -> Iterator[tuple[str, Any]]:
    """(where, document) for every YAML document in the docs' ```yaml blocks and in examples/*.yaml."""
    for path in sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("examples/*/README.md")]):
        text = path.read_text()
        for number, match in enumerate(re.finditer(r"```yaml\n(.*?)```", text, re.S)):
            for index, document in enumerate(yaml.safe_load_all(match.group(1))):
                if document is not None:
                    yield f"{path.relative_to(ROOT)}#yaml{number}.{index}", document
    for path in sorted(ROOT.glob("examples/**/*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            if document is not None:
                yield f"{path.relative_to(ROOT)}.{index}", document


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        (where, doc)
        for where, doc in _blocks()
        if isinstance(doc, dict)
        and doc.get("apiVersion")
        and doc.get("kind")
        and not str(doc["apiVersion"]).startswith(NOT_OBJECTS)
    ]


def _configs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (where, doc)
        for where, doc in _blocks()
        if isinstance(doc, dict) and "apiVersion" not in doc and set(doc) & set(CONFIG_SECTIONS)
    ]


OBJECTS = _objects()
CONFIGS = _configs()


def test_the_examples_are_found() -> None:
    # The collection itself: a change of layout must not make the tests below silently empty.
    kinds = {doc["kind"] for _, doc in OBJECTS}
    assert {"Pod", "PodGroup", "Queue", "Topology", "Node"} <= kinds, kinds
    assert CONFIGS, "docs/operator.md shows config sections"


def test_every_example_object_is_accepted_by_the_api_server(sched: Scenario) -> None:
    # One namespace for all of them (a namespace per object would be created and terminated hundreds of times);
    # every refusal is collected before the test fails, so one run names them all.
    refused, missing = [], []
    for where, doc in OBJECTS:
        body = {**doc, "metadata": {k: v for k, v in (doc.get("metadata") or {}).items() if k != "namespace"}}
        proc = sched.kube.kubectl(
            "apply", "--dry-run=server", "-n", sched.namespace, "-f", "-", input=yaml.safe_dump(body), check=False
        )
        if proc.returncode == 0:
            continue
        group = str(doc["apiVersion"]).split("/")[0]
        if "no matches for kind" in proc.stderr and group != kube_mod.GROUP:
            missing.append(f"{where}: {doc['kind']} ({group})")
        else:
            refused.append(f"{where}: {proc.stderr.strip()}")
    assert not refused, "\n".join(refused)
    # Workload kinds of other projects (JobSet, LeaderWorkerSet, ...) are checked where their CRDs are installed
    # (test_workloads_e2e.py); here they may not be.
    assert len(missing) < len(OBJECTS) / 2, missing


@pytest.mark.parametrize(("where", "doc"), CONFIGS, ids=[w for w, _ in CONFIGS])
def test_every_example_config_is_read_by_gpusched(where: str, doc: dict[str, Any]) -> None:
    config = k8s_config.parse(doc, source=where)
    Framework.build(config.profile)  # plugin names and arguments too


def test_the_kind_example_runs_as_written(sched: Scenario) -> None:
    # examples/kind/README.md: four fake GPU nodes, two queues, a gang that must share one NVLink clique and two
    # single pods (a whole GPU and half of one).
    folder = ROOT / "examples" / "kind"
    for node in yaml.safe_load_all((folder / "fake-gpu-nodes.yaml").read_text()):
        if node:
            sched.add_node(node, wait_ready=False)
    for name in list(sched.nodes):
        sched.wait_node_ready(name)
    for queue in yaml.safe_load_all((folder / "queues.yaml").read_text()):
        if queue:
            sched.create_queue(queue)
    sched.start_gpusched()
    pods = []
    for doc in yaml.safe_load_all((folder / "workload.yaml").read_text()):
        if not doc:
            continue
        if doc["kind"] == "PodGroup":
            sched.create_podgroup(doc)
        else:
            sched.create_pod(doc)
            pods.append(doc["metadata"]["name"])
    bound = sched.wait_bound(pods, timeout=90)
    cliques = {n["metadata"]["name"]: n["metadata"]["labels"].get("nvidia.com/gpu.clique") for n in sched.my_nodes()}
    gang = [p for p in bound if p["metadata"].get("labels", {}).get(kube_mod.LABEL_POD_GROUP)]
    assert gang, "the example has a gang"
    assert len({cliques[node_of(p)] for p in gang}) == 1, [node_of(p) for p in gang]
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())


#: The kind walkthrough (examples/kind/README.md): what it puts in the cluster before any workload.
KIND = ROOT / "examples" / "kind"
#: Kinds a workload example creates (anything else in its files is set-up: a Queue, a claim template).
WORKLOAD_KINDS = ("Pod", "Job", "PodGroup")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict) and doc.get("kind")]


def _workload_files() -> list[Path]:
    """Every file of examples/ that creates pods, but the kind walkthrough's own set-up and what runs under Kueue
    (examples/kueue: its Jobs stay suspended until Kueue admits them; test_kueue_e2e.py runs them with Kueue)."""
    files = []
    for path in sorted(ROOT.glob("examples/*/*.yaml")):
        kinds = {doc["kind"] for doc in _documents(path)}
        if kinds & set(WORKLOAD_KINDS) and path.parent.name != "kueue":
            files.append(path)
    return files


def _pods_expected(docs: list[dict[str, Any]]) -> int:
    """The pods a file's objects make at once: its Pods, and each Job's parallelism."""
    pods = sum(1 for doc in docs if doc["kind"] == "Pod")
    jobs = sum(int(doc["spec"].get("parallelism", 1)) for doc in docs if doc["kind"] == "Job")
    return pods + jobs


def test_every_example_workload_schedules_on_the_kind_walkthrough_nodes(sched: Scenario) -> None:
    """Each workload of examples/ (kind's, k3d's, the Indexed Job, HAMi's, DRA's and device-plugin MIG's pods),
    applied with kubectl as written, on the nodes and queues of the kind walkthrough as shipped (its fake MIG nodes
    too), one file after the other: every pod it makes binds. The workloads, hami and dra examples lacked the fake
    nodes' toleration, and their queue ``team-a`` was made nowhere: their pods waited for ever."""
    workloads = _workload_files()
    assert {p.relative_to(ROOT).as_posix() for p in workloads} >= {
        "examples/kind/workload.yaml",
        "examples/workloads/indexed-job.yaml",
        "examples/hami/pod.yaml",
        "examples/dra/gpu-claims.yaml",
        "examples/mig/pods.yaml",
    }
    # The walkthrough's cluster: its fake nodes and what comes with them (a DeviceClass, ResourceSlices), then
    # its queues, in the order its README applies them.
    made: list[tuple[str, str]] = []
    try:
        for path in sorted(KIND.glob("fake-*.yaml")):
            for doc in _documents(path):
                if doc["kind"] == "Node":
                    sched.add_node(doc, wait_ready=False)
                else:
                    sched.kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
                    made.append((doc["kind"].lower(), doc["metadata"]["name"]))
        for name in list(sched.nodes):
            sched.wait_node_ready(name)
        for queue in _documents(KIND / "queues.yaml"):
            sched.create_queue(queue)
        sched.start_gpusched()

        for path in workloads:
            docs = _documents(path)
            sched.queues.extend(doc["metadata"]["name"] for doc in docs if doc["kind"] == "Queue")
            sched.kube.kubectl("apply", "-n", sched.namespace, "-f", str(path))
            expected = _pods_expected(docs)

            def bound(expected: int = expected) -> list[dict[str, Any]] | None:
                pods = [p for p in sched.pods() if not p["metadata"].get("deletionTimestamp")]
                return pods if len(pods) == expected and all(node_of(p) for p in pods) else None

            # Bound is what is checked here; double bookings are the invariant tests' (HAMi's shared pods carry
            # nvidia.com/gpu: 1 each and share one GPU, which check_no_overcommit would count as whole GPUs).
            kube_mod.wait_until(
                bound,
                timeout=90,
                what=f"the {expected} pods of {path.relative_to(ROOT)} bound",
                describe=sched.describe,
            )
            sched.kube.kubectl("delete", "-n", sched.namespace, "-f", str(path), "--wait=false")
            sched.kube.request(
                "DELETE", kube_mod.Kube.pods_path(sched.namespace), query={"gracePeriodSeconds": "0"}, timeout=60
            )
            kube_mod.wait_until(lambda: not sched.pods(), timeout=60, what=f"the pods of {path.name} gone")
    finally:
        for kind, name in reversed(made):
            sched.kube.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)
