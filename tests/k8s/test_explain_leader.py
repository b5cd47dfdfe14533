"""``gpusched explain`` finds the leader wherever it runs: through the pod proxy in the cluster, else at the
address the leader published on its Lease (``gpusched run`` on a laptop against a cluster)."""

from __future__ import annotations

import argparse
import asyncio
import pathlib

import pytest
import yaml

from scheduler.k8s import client as k8s
from scheduler.k8s import run
from scheduler.k8s.leader import EXPLAIN_URL_ANNOTATION
from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import explain, health
from tests.k8s.fakeapi import FakeApiServer

NS = "gpusched-system"


def _args(target: str) -> argparse.Namespace:
    return argparse.Namespace(
        target=target,
        namespace="default",
        url=None,
        timeout=5.0,
        scheduler_namespace=NS,
        lease_name="gpusched",
        health_port=explain.HEALTH_PORT,
        token_file=None,
    )


def _as_alice(fake: FakeApiServer, client: k8s.Client) -> None:
    """The client's kubeconfig user is alice (a bearer token), who may read the queues."""
    fake.tokens["alice-token"] = "alice"
    fake.rights.add(("alice", "get", "queues.scheduling.gpusched.io", ""))
    client.api.configuration.api_key["BearerToken"] = "Bearer alice-token"


def _lease(holder: str, url: str) -> dict[str, object]:
    return {
        "metadata": {
            "name": "gpusched",
            "namespace": NS,
            "resourceVersion": "1",
            "annotations": {EXPLAIN_URL_ANNOTATION: url},
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


async def test_explain_asks_the_address_the_leader_published_when_no_scheduler_pod_runs(
    fake: FakeApiServer, client: k8s.Client, operator: Operator
) -> None:
    operator.node_event({"metadata": {"name": "gpu-0"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    operator.listed()
    operator.set_leading(True)
    _as_alice(fake, client)
    servers = await health.serve(operator, health_port=0, metrics_port=0, host="127.0.0.1")
    try:
        fake.leases[(NS, "gpusched")] = _lease("laptop-42", run.explain_url("0.0.0.0", servers.health_port))
        code, text, source = await explain._ask_pods(client, _args("queue/default"))
    finally:
        await servers.close()
    assert code == 200, text
    assert text.startswith("queue default")
    assert f"http://127.0.0.1:{servers.health_port}" in source and "laptop-42" in source


async def test_explain_says_where_it_looked_when_nothing_answers(fake: FakeApiServer, client: k8s.Client) -> None:
    code, text, _ = await explain._ask_pods(client, _args("train-0"))
    assert code == 0
    assert f"no running scheduler pod in {NS}" in text
    assert f"no leader published its address on Lease {NS}/gpusched" in text

    # A released Lease (no holder) names nobody to ask, whatever address it still carries.
    fake.leases[(NS, "gpusched")] = _lease("", "http://127.0.0.1:1")
    code, text, _ = await explain._ask_pods(client, _args("train-0"))
    assert code == 0 and "no leader published its address" in text


def test_the_published_address_stands_for_all_interfaces_with_the_loopback() -> None:
    assert run.explain_url("0.0.0.0", 8081) == "http://127.0.0.1:8081"
    assert run.explain_url("::", 8081) == "http://[::1]:8081"
    assert run.explain_url("10.1.2.3", 9000) == "http://10.1.2.3:9000"
    assert run.explain_url("fd00::7", 8081) == "http://[fd00::7]:8081"


async def test_the_command_prints_the_answer_and_who_answered_and_no_log_line(
    fake: FakeApiServer,
    client: k8s.Client,
    operator: Operator,
    tmp_path: pathlib.Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    operator.listed()
    operator.set_leading(True)
    _as_alice(fake, client)
    servers = await health.serve(operator, health_port=0, metrics_port=0, host="127.0.0.1")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
                "users": [{"name": "me", "user": {"token": "alice-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                "current-context": "fake",
            }
        )
    )
    try:
        fake.leases[(NS, "gpusched")] = _lease("laptop-42", run.explain_url("0.0.0.0", servers.health_port))
        capfd.readouterr()
        args = _args("queue/default")
        args.kubeconfig, args.context = str(kubeconfig), None
        code = await asyncio.to_thread(explain.main, args)
    finally:
        await servers.close()
    out, err = capfd.readouterr()
    assert code == 0
    assert out.startswith("queue default")
    assert err.startswith("(answered by http://127.0.0.1:") and len(err.splitlines()) == 1, err
