"""What a platform team sees with kubectl (issue 17): a waiting gang member's condition, pods told why they wait,
``kubectl get podgroups,gq,topo -o wide`` columns, and ``gpusched explain`` answered by the running leader.

The outputs are printed (``pytest -s``) so that they can be quoted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import kube as kube_mod
from tests.e2e.kube import APIError, Scenario

pytestmark = pytest.mark.e2e

TOPOLOGY_PATH = kube_mod.Kube.custom_path("topologies", name="default")


@pytest.fixture
def topology(sched: Scenario) -> Iterator[dict[str, Any]]:
    """The Topology ``default`` (cluster-wide, one per cluster): deleted at the end."""
    body = {
        "apiVersion": f"{kube_mod.GROUP}/{kube_mod.VERSION}",
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {
            "levels": [
                {"name": "block", "nodeLabel": kube_mod.LABEL_BLOCK},
                {"name": "rack", "nodeLabel": kube_mod.LABEL_RACK},
            ]
        },
    }
    with contextlib.suppress(APIError):
        sched.kube.request("DELETE", TOPOLOGY_PATH)
    created: dict[str, Any] = sched.kube.request("POST", kube_mod.Kube.custom_path("topologies"), body)
    try:
        yield created
    finally:
        with contextlib.suppress(APIError):
            sched.kube.request("DELETE", TOPOLOGY_PATH)


def _condition_message(sched: Scenario, name: str, starts: str) -> str:
    def told() -> str | None:
        condition = kube_mod.condition(sched.pod(name), "PodScheduled") or {}
        message = str(condition.get("message") or "")
        if condition.get("status") == "False" and condition.get("reason") == "Unschedulable" and starts in message:
            return message
        return None

    found: str = kube_mod.wait_until(told, timeout=30, what=f"pod {name} PodScheduled=False: {starts!r}")
    return found


#: What a user needs to read ``gpusched explain``'s answers in the scenario's namespace, and the Queues.
READER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    {"apiGroups": ["scheduling.gpusched.io"], "resources": ["podgroups"], "verbs": ["get"]},
]
QUEUE_READER_RULES = [{"apiGroups": ["scheduling.gpusched.io"], "resources": ["queues"], "verbs": ["get"]}]


def _run_explain(sched: Scenario, url: str, kubeconfig: Path, *target: str) -> subprocess.CompletedProcess[str]:
    """``gpusched explain TARGET -n NS --url URL`` as the user of ``kubeconfig`` (its token is sent)."""
    return subprocess.run(
        [*kube_mod.gpusched_command(), "explain", *target, "-n", sched.namespace, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )


def _explain(sched: Scenario, url: str, kubeconfig: Path, *target: str) -> tuple[str, str, float]:
    started = time.monotonic()
    done = _run_explain(sched, url, kubeconfig, *target)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr, elapsed


def test_what_kubectl_shows(sched: Scenario, topology: dict[str, Any]) -> None:
    ns = sched.namespace
    nodes = [
        kube_mod.gpu_node("pv-0", rack="r1", block="b1"),
        kube_mod.gpu_node("pv-1", rack="r2", block="b1"),
        # Tainted: the most free GPUs in the cluster, on a node no pod here tolerates.
        kube_mod.gpu_node("pv-tainted", rack="r3", block="b1", taints=[{"key": "maint", "effect": "NoSchedule"}]),
    ]
    sched.add_nodes(nodes)
    sched.create_queue(
        kube_mod.queue(f"{ns}-a", guaranteed={"nvidia.com/gpu": "8", "memory": "256Gi"}, limit={"nvidia.com/gpu": "40"})
    )
    replica = sched.start_gpusched()
    url = f"http://127.0.0.1:{replica.health_port}"

    # A pod and its PodGroup created together, the pod first: no PodGroupNotFound.
    sched.create_pod(kube_mod.pod("same-0", cpu="500m", group="same", queue=f"{ns}-a"))
    sched.create_podgroup(kube_mod.podgroup("same", min_member=1, queue=f"{ns}-a"))
    sched.wait_bound(["same-0"])

    # One node's GPUs taken by a single pod of the queue; 8 usable GPUs left (pv-tainted's 8 are not usable).
    sched.create_pod(kube_mod.pod("solo", gpus=8, cpu="2500m", queue=f"{ns}-a"))
    sched.wait_bound(["solo"])

    # A gang of 4 x 8 GPUs: two members first (waiting for members), then all four (waiting for room).
    sched.create_podgroup(kube_mod.podgroup("train", min_member=4, queue=f"{ns}-a"))
    for i in range(2):
        sched.create_pod(kube_mod.pod(f"train-{i}", gpus=8, group="train"))
    exist = _condition_message(sched, "train-0", f"waiting for gang {ns}/train: 2 of 4 members exist")
    for i in range(2, 4):
        sched.create_pod(kube_mod.pod(f"train-{i}", gpus=8, group="train"))
    placed = _condition_message(sched, "train-3", f"waiting for gang {ns}/train: 0 of 4 members placed;")
    sched.stays_unbound([f"train-{i}" for i in range(4)], seconds=2)

    # A typo'd queue: the pod says so in its condition, not only in an Event.
    sched.create_pod(kube_mod.pod("typo", gpus=1, queue=f"{ns}-typo"))
    typo = _condition_message(sched, "typo", f"queue '{ns}-typo' does not exist")

    time.sleep(6)  # past the PodGroupNotFound grace
    assert [e for e in sched.kube.events(ns) if e.get("reason") == "PodGroupNotFound"] == []

    # kubectl get, as a user would run it.
    def shown() -> str | None:
        out = sched.kube.kubectl("get", "podgroups,gq,topo", "-n", ns, "-o", "wide").stdout
        return out if "0/4" in out and "True" in out and "1/1" in out else None

    table: str = kube_mod.wait_until(shown, timeout=30, what="status columns filled")
    for header in ("MEMBERS", "GPU GUARANTEE", "GPU LIMIT", "GPU ALLOCATED", "PENDING JOBS", "ADMITTED JOBS"):
        assert header in table, table
    for header in ("FAIR SHARE", "RANK SHARE", "MEMORY ALLOCATED", "LEVELS", "ACCEPTED"):
        assert header in table, table
    queue_line = next(line for line in table.splitlines() if line.startswith(f"queue.scheduling.gpusched.io/{ns}-a"))
    assert "2500m" not in queue_line.split()[4:5], queue_line  # GPU ALLOCATED is GPUs (after ACCEPTED and LIMIT)
    status = sched.kube.request("GET", kube_mod.Kube.custom_path("queues", name=f"{ns}-a"))["status"]
    assert status["allocated"]["nvidia.com/gpu"] == "8" and status["allocated"]["cpu"] == "3", status
    topo_line = next(line for line in table.splitlines() if line.startswith("topology."))
    assert " 2 " in topo_line and "True" in topo_line, topo_line

    described = sched.kube.kubectl("describe", "pod", "train-0", "-n", ns).stdout
    # describe shows a condition's type and status only; the message is in the pod's status and its Events.
    assert "PodScheduled   False" in described and f"waiting for gang {ns}/train" in described, described

    reader = sched.account_kubeconfig("explain-reader", rules=READER_RULES, cluster_rules=QUEUE_READER_RULES)
    answer, timing, elapsed = _explain(sched, url, reader, "train-0")
    assert f"member of gang {ns}/train (minMember 4): 0 placed, 4 exist" in answer, answer
    assert "pv-tainted" not in answer.split("GPUs:")[1], answer
    assert "(pv-1)" in answer or "(pv-0)" in answer, answer
    assert answer.startswith(f"pod {ns}/train-0") and "answered by" in timing
    group, _, _ = _explain(sched, url, reader, "podgroup/train")
    assert "placing 4 members together now fails" in group, group
    queue, _, _ = _explain(sched, url, reader, f"queue/{ns}-a")
    assert "guarantee: memory 256Gi, nvidia.com/gpu 8" in queue and "cpu 3" in queue, queue
    # The process start (seconds of Python imports; more on a loaded machine), printed rather than bounded: the
    # answer's own time is in the timing line.
    print(f"\n[platform-view] gpusched explain queue/{ns}-a took {elapsed:.2f}s, process start included")

    metrics = replica.metrics()
    for line in ("process_resident_memory_bytes", 'gpusched_pending_jobs{state="unschedulable"}'):
        assert line in metrics
    assert f'queue="{ns}-typo"' not in metrics

    print("\n$ kubectl get podgroups,gq,topo -o wide\n" + table)
    print(f"$ kubectl describe pod train-0 -n {ns}\n" + described)
    print(f"$ gpusched explain train-0 -n {ns} --url {url}\n{answer}{timing}(process {elapsed:.2f} s)")
    print(f"$ gpusched explain podgroup/train -n {ns}\n{group}")
    print(f"$ gpusched explain queue/{ns}-a\n{queue}")
    print(f"conditions:\n  {exist}\n  {placed}\n  {typo}")


def test_explain_answers_only_a_user_who_may_read_what_it_explains(sched: Scenario) -> None:
    """``/explain`` asks the API server who is asking (TokenReview) and whether they may ``get`` the pod, the
    PodGroup or the Queue (SubjectAccessReview): a ServiceAccount without rights is refused, one that may read
    pods in the namespace is answered, and nobody without a token is."""
    ns = sched.namespace
    sched.add_nodes([kube_mod.gpu_node("acc-0")])
    replica = sched.start_gpusched()
    url = f"http://127.0.0.1:{replica.health_port}"
    sched.create_pod(kube_mod.pod("big", gpus=16))
    _condition_message(sched, "big", "")
    nobody = sched.account_kubeconfig("nobody")
    reader = sched.account_kubeconfig("pod-reader", rules=READER_RULES[:1])

    refused = _run_explain(sched, url, nobody, "big")
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert f'system:serviceaccount:{ns}:nobody may not get pods "big" in namespace {ns}' in refused.stderr
    answered = _run_explain(sched, url, reader, "big")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith(f"pod {ns}/big") and "nodes: 0 of 1 pass every filter" in answered.stdout
    # Reading pods is not reading the Queues.
    queue = _run_explain(sched, url, reader, "queue/default")
    assert queue.returncode == 1 and "may not get queues.scheduling.gpusched.io" in queue.stderr, queue.stderr

    def status_of(token: str, path: str = f"/explain?target=big&namespace={ns}") -> tuple[int, Any]:
        request = urllib.request.Request(url + path)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                code, raw = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            code, raw = exc.code, exc.read()
        try:
            return code, json.loads(raw)
        except ValueError:
            return code, raw.decode()

    code, body = status_of("")
    assert code == 401 and body["missing"] == "token"
    code, body = status_of("not-a-token")
    assert code == 401 and "does not know this token" in body["message"]
    token = yaml.safe_load(nobody.read_text())["users"][0]["user"]["token"]
    code, body = status_of(token)
    assert code == 403 and body["missing"]["resourceAttributes"] == {
        "namespace": ns,
        "verb": "get",
        "resource": "pods",
        "name": "big",
    }
    assert status_of("", "/healthz") == (200, "ok")  # the probes stay open
    assert status_of("", "/readyz") == (200, "ready")


def _host_address() -> str | None:
    """An IPv4 address of this machine that the API server may proxy to (not loopback: kube-apiserver refuses to
    proxy there), or None."""
    try:
        found = {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        found = set()
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route's source address is read
        found.add(probe.getsockname()[0])
    addresses = [ipaddress.ip_address(a) for a in found]
    usable = sorted(str(a) for a in addresses if not a.is_loopback and not a.is_link_local)
    return usable[0] if usable else None


def test_through_the_pod_proxy_explain_is_asked_as_the_user(sched: Scenario) -> None:
    """``gpusched explain`` without ``--url`` asks the scheduler's pods through the API server's pod proxy, which
    drops ``Authorization`` once it has authenticated the caller: the user's token must still reach ``/explain``
    (``Gpusched-Authorization``), and the answer is the user's. A stand-in pod labelled as the scheduler's, its IP
    set to this machine's, lets the real API server proxy to the ``gpusched run`` of the test."""
    address = _host_address()
    if address is None:
        pytest.skip("no non-loopback IPv4 address on this machine for the API server to proxy to")
    ns = sched.namespace
    sched.add_nodes([kube_mod.gpu_node("px-0")])
    replica = sched.start_gpusched()
    sched.create_pod(kube_mod.pod("big", gpus=16))
    _condition_message(sched, "big", "")
    standin = kube_mod.pod("gpusched-standin", labels={"app.kubernetes.io/name": "gpusched"})
    standin["spec"]["nodeName"] = "px-0"
    sched.create_pod(standin)

    def running() -> dict[str, Any] | None:
        got = sched.pod("gpusched-standin")
        return got if (got.get("status") or {}).get("phase") == "Running" else None

    kube_mod.wait_until(running, timeout=60, what="the stand-in pod Running")
    patch = {"status": {"podIP": address, "podIPs": [{"ip": address}]}}
    path = kube_mod.Kube.pods_path(ns, "gpusched-standin") + "/status"
    sched.kube.request("PATCH", path, patch, content_type="application/merge-patch+json")
    kube_mod.wait_until(
        lambda: sched.pod("gpusched-standin")["status"].get("podIP") == address, timeout=30, what="the pod's IP set"
    )
    proxy = [{"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}]
    list_pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    reader = sched.account_kubeconfig("proxy-reader", rules=[*READER_RULES[:1], *list_pods, *proxy])
    lister = sched.account_kubeconfig("proxy-lister", rules=[*list_pods, *proxy])

    def ask(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *kube_mod.gpusched_command(),
                "explain",
                "big",
                "-n",
                ns,
                "--scheduler-namespace",
                ns,
                "--lease-name",
                "no-such-lease",
                "--health-port",
                str(replica.health_port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        )

    answered = ask(reader)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith(f"pod {ns}/big"), answered.stdout
    assert f"answered by pod {ns}/gpusched-standin" in answered.stderr, answered.stderr
    refused = ask(lister)  # may reach the pod, may not read the pod explained: asked as itself, refused
    assert refused.returncode == 1, refused
    assert f'system:serviceaccount:{ns}:proxy-lister may not get pods "big" in namespace {ns}' in refused.stderr
