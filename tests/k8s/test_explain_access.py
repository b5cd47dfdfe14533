"""Nothing readable without a right: ``/explain`` asks the API server who the caller is (TokenReview) and whether
they may ``get`` what is explained (SubjectAccessReview), as the dashboard does; the probes stay open; and
``gpusched explain`` sends its kubeconfig user's token, through the pod proxy too (which drops ``Authorization``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml

from scheduler.k8s import client as k8s
from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import access, explain, health
from tests.k8s.fakeapi import FakeApiServer
from tests.k8s.test_operator import node, pod, podgroup

NS = "gpusched-system"
QUEUES = "queues.scheduling.gpusched.io"
PODGROUPS = "podgroups.scheduling.gpusched.io"


@pytest.fixture
async def served(fake: FakeApiServer, leader: Operator) -> AsyncIterator[str]:
    """The leader's health server (its base URL), with a pending pod ``team-a/train-0`` in gang ``team-a/train``
    and a queue ``team-a``; alice may read pods and PodGroups in team-a and the Queues, bob nothing."""
    leader.queue_event({"metadata": {"name": "team-a"}, "spec": {"guaranteed": {"nvidia.com/gpu": "4"}}})
    leader.node_event(node("gpu-0", gpus=8))
    group = podgroup("train", 2)
    group["metadata"]["namespace"] = "team-a"
    leader.podgroup_event(group)
    member = pod("train-0", 1, labels={"gpusched.io/pod-group": "train"})
    member["metadata"]["namespace"] = "team-a"
    leader.pod_event(member)
    leader.listed()
    leader.loop.run_until_idle()
    fake.tokens.update({"alice-token": "alice", "bob-token": "bob"})
    fake.rights |= {
        ("alice", "get", "pods", "team-a"),
        ("alice", "get", PODGROUPS, "team-a"),
        ("alice", "get", QUEUES, ""),
    }
    servers = await health.serve(leader, health_port=0, metrics_port=0, host="127.0.0.1")
    yield f"http://127.0.0.1:{servers.health_port}"
    await servers.close()


async def get(url: str, token: str = "", *, header: str = "Authorization") -> tuple[int, Any]:
    headers = {header: f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text


def reviews(fake: FakeApiServer) -> list[dict[str, Any]]:
    return [seen.body for seen in fake.requests("POST", "/subjectaccessreviews")]


async def test_no_token_or_an_unknown_one_is_401_and_a_user_without_the_right_403_naming_it(
    fake: FakeApiServer, served: str
) -> None:
    url = f"{served}/explain?target=train-0&namespace=team-a"
    status, body = await get(url)
    assert (status, body["missing"]) == (401, "token")
    assert "bearer token" in body["message"]
    status, body = await get(url, "stolen")
    assert (status, body["missing"]) == (401, "token")
    assert "does not know this token" in body["message"]
    status, body = await get(url, "bob-token")
    assert status == 403
    assert body["message"] == 'bob may not get pods "train-0" in namespace team-a'
    assert body["missing"] == {
        "resourceAttributes": {"namespace": "team-a", "verb": "get", "resource": "pods", "name": "train-0"}
    }
    status, body = await get(url, "alice-token")
    assert status == 200 and body["answer"].startswith("pod team-a/train-0")
    # What the scheduler asked for bob, exactly: his user and the pod.
    spec = reviews(fake)[0]["spec"]
    assert spec["user"] == "bob" and spec["resourceAttributes"]["name"] == "train-0"


async def test_a_gang_needs_get_on_its_podgroup_and_a_queue_get_on_the_queue(fake: FakeApiServer, served: str) -> None:
    for target, namespace, right in (
        ("podgroup/train", "team-a", 'get podgroups.scheduling.gpusched.io "train" in namespace team-a'),
        ("queue/team-a", "team-a", 'get queues.scheduling.gpusched.io "team-a"'),
    ):
        url = f"{served}/explain?target={target}&namespace={namespace}"
        status, body = await get(url, "bob-token")
        assert (status, body["message"]) == (403, f"bob may not {right}"), target
        status, body = await get(url, "alice-token")
        assert status == 200, body
    queue_review = reviews(fake)[-1]["spec"]["resourceAttributes"]
    assert queue_review == {"verb": "get", "group": "scheduling.gpusched.io", "resource": "queues", "name": "team-a"}
    # Pods of another namespace stay closed to alice.
    status, body = await get(f"{served}/explain?target=other&namespace=team-b", "alice-token")
    assert status == 403 and "in namespace team-b" in body["message"]


async def test_the_probes_answer_without_a_token(served: str) -> None:
    assert await get(f"{served}/healthz") == (200, "ok")
    assert await get(f"{served}/readyz") == (200, "ready")
    assert await get(f"{served}/leader") == (200, "leader")


async def test_an_api_server_that_cannot_be_asked_tells_nothing(fake: FakeApiServer, served: str) -> None:
    await fake.close()  # the reviews get no answer
    status, body = await get(f"{served}/explain?target=train-0&namespace=team-a", "alice-token")
    assert status == 503 and "cannot review the token" in body["message"]


def _args(target: str, namespace: str = "team-a", **more: object) -> argparse.Namespace:
    given: dict[str, object] = {
        "target": target,
        "namespace": namespace,
        "url": None,
        "timeout": 5.0,
        "scheduler_namespace": NS,
        "lease_name": "gpusched",
        "health_port": explain.HEALTH_PORT,
        "token_file": None,
        "kubeconfig": None,
        "context": None,
    }
    return argparse.Namespace(**{**given, **more})


async def test_through_the_pod_proxy_the_users_token_reaches_the_scheduler(
    fake: FakeApiServer, client: k8s.Client, served: str
) -> None:
    """The API server's pod proxy drops ``Authorization``: the token travels in ``Gpusched-Authorization``."""
    fake.pods[f"{NS}/gpusched-0"] = {
        "metadata": {"name": "gpusched-0", "namespace": NS},
        "status": {"phase": "Running"},
    }
    fake.pod_proxies["gpusched-0"] = served
    client.api.configuration.api_key["BearerToken"] = "Bearer alice-token"
    code, text, source = await explain._ask_pods(client, _args("train-0"))
    assert (code, source) == (200, f"pod {NS}/gpusched-0")
    assert text.startswith("pod team-a/train-0")
    client.api.configuration.api_key["BearerToken"] = "Bearer bob-token"
    code, text, _ = await explain._ask_pods(client, _args("train-0"))
    assert (code, text) == (403, 'bob may not get pods "train-0" in namespace team-a')
    proxied = fake.requests("GET", "/proxy/explain")
    assert len(proxied) == 2


def _kubeconfig(path: pathlib.Path, server: str, user: dict[str, Any]) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return str(path)


async def test_the_command_asks_with_the_kubeconfig_token_or_an_exec_plugins(
    fake: FakeApiServer, served: str, tmp_path: pathlib.Path
) -> None:
    static = _kubeconfig(tmp_path / "static", fake.url, {"token": "alice-token"})
    code, text, _ = await explain._ask(_args("queue/team-a", url=served, kubeconfig=static))
    assert code == 200 and text.startswith("queue team-a"), text
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "alice-token"},
    }
    plugin = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
            "interactiveMode": "Never",
        }
    }
    by_exec = _kubeconfig(tmp_path / "exec", fake.url, plugin)
    code, text, _ = await explain._ask(_args("podgroup/train", url=served, kubeconfig=by_exec))
    assert code == 200 and text.startswith("podgroup team-a/train"), text


async def test_a_user_without_a_token_is_told_why(
    fake: FakeApiServer, served: str, tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]
) -> None:
    certificate = _kubeconfig(tmp_path / "cert", fake.url, {})
    code = await asyncio.to_thread(explain.main, _args("train-0", url=served, kubeconfig=certificate))
    err = capfd.readouterr().err
    assert code == 1
    assert "explain needs a Kubernetes bearer token" in err and "--token-file" in err
    token = tmp_path / "token"
    token.write_text("alice-token\n")
    code = await asyncio.to_thread(
        explain.main, _args("train-0", url=served, kubeconfig=certificate, token_file=str(token))
    )
    out = capfd.readouterr().out
    assert code == 0 and out.startswith("pod team-a/train-0")


async def test_made_up_tokens_cannot_spend_more_than_the_reviewers_own_budget(
    fake: FakeApiServer, client: k8s.Client
) -> None:
    """Each unknown token is a new TokenReview; past the budget the request is refused at once (429) and the API
    server is not asked, while a user whose answers are kept is still answered."""
    fake.tokens["alice-token"] = "alice"
    fake.rights.add(("alice", "get", "pods", "team-a"))
    now = [0.0]
    reviewer = access.Reviewer(client, clock=lambda: now[0], qps=5.0, burst=20)
    right = access.pods_in("team-a", name="train-0")
    assert isinstance(await reviewer.check("alice-token", right), access.User)  # two reviews
    answers = [await reviewer.check(f"made-up-{i}", right) for i in range(40)]
    statuses = [a.status for a in answers if isinstance(a, access.Refusal)]
    assert statuses == [401] * 18 + [429] * 22
    assert len(fake.requests("POST", "/tokenreviews")) == 19
    assert isinstance(await reviewer.check("alice-token", right), access.User)  # kept: nothing asked
    now[0] += 1.0  # five more a second
    assert [getattr(await reviewer.check(f"later-{i}", right), "status", 0) for i in range(6)] == [401] * 5 + [429]
