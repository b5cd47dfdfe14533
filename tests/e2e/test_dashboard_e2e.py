"""The dashboard of ``gpusched run --dashboard-port`` in a real browser (Debian's headless Chromium, over CDP):
the map shows the nodes' GPUs, a pod bound shows up without a reload, a queue's numbers are its status as kubectl
shows it, a waiting gang appears with its reason, and the Kubernetes access check (TokenReview and
SubjectAccessReview) hides the names of a namespace the viewer may not list pods in; a standby sends the browser to
the leader's dashboard.

Screenshots of each page are kept as the test's artefacts in ``$GPUSCHED_E2E_ARTIFACTS/dashboard`` (default
``~/.cache/gpusched/artifacts/dashboard``; the folder is printed with ``pytest -s``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.dashboard import charts
from tests.e2e import kube as kube_mod
from tests.e2e.browser import Browser, chromium
from tests.e2e.kube import APIError, Scenario
from tests.e2e.localcluster import free_port

pytestmark = pytest.mark.e2e

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _token(sched: Scenario, account: str) -> str:
    ns = sched.namespace
    sched.kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": account}})
    answer = sched.kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    return str(answer["status"]["token"])


@contextlib.contextmanager
def _viewers(sched: Scenario) -> Iterator[tuple[str, str]]:
    """Two ServiceAccounts' tokens: one may open the dashboard and list pods everywhere, the other may open it and
    list pods only in another namespace. The cluster-wide roles are deleted at the end."""
    ns = sched.namespace
    other = f"{ns}-other"
    sched.kube.ensure_namespace(other)
    names = [f"gpusched-dashboard-{ns}", f"gpusched-dashboard-all-{ns}"]
    rules = {
        names[0]: [{"nonResourceURLs": ["/dashboard"], "verbs": ["get"]}],
        names[1]: [
            {"nonResourceURLs": ["/dashboard"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ],
    }
    accounts = {names[0]: "viewer-other", names[1]: "viewer-all"}
    try:
        tokens = {account: _token(sched, account) for account in accounts.values()}
        for name, account in accounts.items():
            subject = [{"kind": "ServiceAccount", "name": account, "namespace": ns}]
            sched.kube.request("POST", f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": rules[name]})
            sched.kube.request(
                "POST",
                f"{RBAC}/clusterrolebindings",
                {
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": subject,
                },
            )
        sched.kube.request(
            "POST",
            f"{RBAC}/namespaces/{other}/rolebindings",
            {
                "metadata": {"name": "pods-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "viewer-other", "namespace": ns}],
            },
        )
        yield tokens["viewer-all"], tokens["viewer-other"]
    finally:
        for name in names:
            for kind in ("clusterrolebindings", "clusterroles"):
                with contextlib.suppress(APIError):
                    sched.kube.request("DELETE", f"{RBAC}/{kind}/{name}")
        with contextlib.suppress(APIError):
            sched.kube.request("DELETE", f"/api/v1/namespaces/{other}")


def _count(browser: Browser, nodes: list[str], state: str) -> int:
    selector = ",".join(f'[data-node="{name}"] .cell[data-state="{state}"]' for name in nodes)
    return int(browser.evaluate(f"document.querySelectorAll('{selector}').length"))


def _queue_cell(browser: Browser, queue: str, field: str) -> str:
    return str(
        browser.evaluate(
            f"(document.querySelector('tr[data-queue=\"{queue}\"] td[data-field=\"{field}\"]') || {{}}).innerText || ''"
        )
    )


def _queue_attribute(browser: Browser, queue: str, field: str, attribute: str) -> str:
    return str(
        browser.evaluate(
            f'document.querySelector(\'tr[data-queue="{queue}"] td[data-field="{field}"]\')'
            f".getAttribute('{attribute}')"
        )
    )


def _chart(browser: Browser, name: str) -> tuple[str, str]:
    """A chart of the map page: the present value it draws, and its caption."""
    figure = f"#trends figure[data-chart={name}]"
    return (
        str(browser.evaluate(f"document.querySelector('{figure}').dataset.now")),
        str(browser.evaluate(f"document.querySelector('{figure} figcaption').innerText")),
    )


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _as_text(amounts: dict[str, Any]) -> str:
    return "\n".join(f"{name} {value}" for name, value in amounts.items())


def test_the_dashboard_in_a_browser(sched: Scenario) -> None:
    binary = chromium()
    ns = sched.namespace
    names = [f"db-{i}" for i in range(3)]
    sched.add_nodes([kube_mod.gpu_node(name, rack=f"r{i % 2}", block="b1") for i, name in enumerate(names)])
    queue = f"{ns}-a"
    sched.create_queue(kube_mod.queue(queue, guaranteed={"nvidia.com/gpu": "4"}, limit={"nvidia.com/gpu": "20"}))
    # Every other GPU is guaranteed to a second queue (it lends them while idle): what the first holds beyond its 4
    # is borrowed from it.
    lender = f"{ns}-b"
    sched.create_queue(kube_mod.queue(lender, guaranteed={"nvidia.com/gpu": "20"}))
    port = free_port()
    replica = sched.gpusched()
    replica.extra_args += [f"--dashboard-port={port}", "--dashboard-auth=kubernetes"]
    if replica.as_service_account:
        sched.bind_auth_delegator()  # what docs/dashboard.md asks of an operator for --dashboard-auth=kubernetes
    replica.start().wait_ready().wait_leader()
    sched.create_pod(kube_mod.pod("first", gpus=4, queue=queue))
    sched.wait_bound(["first"])
    shots = (
        Path(os.environ.get("GPUSCHED_E2E_ARTIFACTS") or Path.home() / ".cache" / "gpusched" / "artifacts")
        / "dashboard"
    )
    shots.mkdir(parents=True, exist_ok=True)

    with _viewers(sched) as (everyone, others_only), contextlib.closing(Browser(binary)) as browser:
        base = f"http://127.0.0.1:{port}"
        browser.goto(f"{base}/")
        assert "needs a Kubernetes bearer token" in browser.evaluate("document.body.innerText")
        opened = browser.goto(f"{base}/?token={everyone}")
        browser.wait_js(f"document.querySelectorAll('[data-node=\"{names[0]}\"]').length == 1")
        assert all(browser.evaluate(f"!!document.querySelector('[data-node=\"{n}\"]')") for n in names)
        cells = sum(
            int(browser.evaluate(f"document.querySelectorAll('[data-node=\"{n}\"] .cell').length")) for n in names
        )
        assert cells == 24
        assert _count(browser, names, "whole") == 4
        headings = browser.evaluate("[...document.querySelectorAll('.domain')].map(d => d.innerText)")
        assert sorted(headings) == ["block=b1 / rack=r0", "block=b1 / rack=r1"], headings
        # The charts of the last hours head the map, the present as their last point: 4 of 24 GPUs held.
        drawn = browser.evaluate("[...document.querySelectorAll('#trends figure')].map(f => f.dataset.chart)")
        assert drawn == ["allocated", "fragmented", "waiting"], drawn
        assert _chart(browser, "allocated") == ("4", "GPUs allocated 4 GPUs of 24 (17%)")
        assert _chart(browser, "waiting")[0] == "0"
        # The scheduler's sampler keeps the start (within a second of its first full listing, which the page may
        # come before: it re-renders within 5 s), the present is the last point.
        browser.wait_js("document.querySelector('#trends figure').dataset.points == '2'", timeout=15)
        browser.screenshot(shots / "dashboard-map.png")

        # A binding shows up live: the same page, never reloaded, within the polling interval.
        browser.evaluate("window.__notReloaded = true")
        sched.create_pod(kube_mod.pod("second", gpus=2, queue=queue))
        sched.wait_bound(["second"])
        bound_at = time.monotonic()
        browser.wait_for(lambda: _count(browser, names, "whole") == 6, timeout=10, what="6 whole GPUs on the map")
        shown_after = time.monotonic() - bound_at
        assert _chart(browser, "allocated") == ("6", "GPUs allocated 6 GPUs of 24 (25%)")  # the chart moved too
        assert browser.evaluate("window.__notReloaded === true")

        # The queue's numbers are its status, as kubectl shows it.
        path = kube_mod.Kube.custom_path("queues", name=queue)

        def status_of() -> dict[str, Any] | None:
            status = sched.kube.request("GET", path).get("status") or {}
            return status if (status.get("allocated") or {}).get("nvidia.com/gpu") == "6" else None

        status: dict[str, Any] = kube_mod.wait_until(status_of, timeout=30, what="the queue's status at 6 GPUs")
        browser.goto(f"{base}/queues")
        browser.wait_js(f"!!document.querySelector('tr[data-queue=\"{queue}\"]')")
        for field in ("allocated", "borrowed", "guaranteedInUse"):
            assert _queue_cell(browser, queue, field) == (_as_text(status.get(field) or {}) or "-"), field
        # Shares in percent, the status's own text beside them; the GPUs as a bar against guarantee and limit.
        assert _queue_attribute(browser, queue, "fairShare", "data-status") == status["fairShare"]
        assert _queue_cell(browser, queue, "fairShare") == charts.share(status["fairShare"])
        assert _queue_cell(browser, queue, "guarantee") == "nvidia.com/gpu 4"
        assert (_queue_cell(browser, queue, "bar").strip(), _queue_cell(browser, lender, "bar").strip()) == (
            "6 GPUs held, 150% of its guarantee of 4 GPUs, 2 GPUs borrowed, limit 20 GPUs",
            "0 GPUs held, 0% of its guarantee of 20 GPUs, 2 GPUs lent, no limit",
        )
        bar = f'tr[data-queue="{queue}"] svg.qbar'
        assert browser.evaluate(f"document.querySelector('{bar}').getBoundingClientRect().width") == 300
        # One scale, 20 GPUs to the bar: 4 within the guarantee are 60 pixels, the 2 borrowed the next 30.
        assert browser.evaluate(f"document.querySelector('{bar} .within').getAttribute('width')") == "60.0"
        assert browser.evaluate(f"document.querySelector('{bar} .borrowed').getAttribute('width')") == "30.0"
        browser.screenshot(shots / "dashboard-queues.png")

        # A gang that cannot fit waits with its reason and its progress.
        sched.create_podgroup(kube_mod.podgroup("train", min_member=3, queue=queue))
        for i in range(3):
            sched.create_pod(kube_mod.pod(f"train-{i}", gpus=8, group="train"))
        browser.goto(f"{base}/waiting")
        row = f'tr[data-job="podgroup/{ns}/train"]'
        browser.wait_js(
            f"!!document.querySelector('{row} td[data-field=reason]') && "
            f"document.querySelector('{row} td[data-field=reason]').innerText != '-'",
            timeout=30,
        )
        assert browser.evaluate(f"document.querySelector('{row} td[data-field=gang]').innerText") == (
            "0/3 placed, 3 exist"
        )
        reason = browser.evaluate(f"document.querySelector('{row} td[data-field=reason]').innerText")
        # Its members ask 8 GPUs each: it waits in that class.
        assert browser.evaluate("document.querySelector('#waits tr[data-class=\"8 GPUs\"]').dataset.jobs") == "1"
        browser.screenshot(shots / "dashboard-waiting.png")
        browser.goto(f"{base}/job/podgroup/{ns}/train")
        explained = browser.wait_js("(document.getElementById('explain') || {}).innerText")
        assert f"podgroup {ns}/train: minMember 3" in explained and "placing 3 members together now fails" in explained
        browser.screenshot(shots / "dashboard-job.png")

        # Another viewer, allowed pods only in another namespace: no name from this one anywhere.
        browser.goto(f"{base}/waiting?token={others_only}")
        browser.wait_js("document.body.innerText.includes('in namespaces you may not list')")
        assert f"{ns}/" not in browser.evaluate("document.body.innerHTML")
        browser.goto(f"{base}/")
        browser.wait_js(f"!!document.querySelector('[data-node=\"{names[0]}\"]')")
        page = browser.evaluate("document.body.innerHTML")
        assert f"{ns}/first" not in page and "(hidden)" in page
        browser.goto(f"{base}/job/podgroup/{ns}/train")
        assert "may not list pods" in browser.evaluate("document.body.innerText")

        # gpusched dashboard: the same pages from a local copy that watches without a lease. Admin credentials: it is
        # what a user runs on their own machine with their own kubeconfig (docs/dashboard.md), not the shipped pod.
        local_port = free_port()
        local = subprocess.Popen(
            [
                *kube_mod.gpusched_command(),
                "dashboard",
                f"--kubeconfig={sched.kube.kubeconfig}",
                f"--dashboard-port={local_port}",
                "--log-format=json",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            started = time.monotonic()
            browser.wait_for(lambda: _answers(local_port), timeout=120, what="gpusched dashboard answering")
            local_ready = time.monotonic() - started
            browser.goto(f"http://127.0.0.1:{local_port}/")
            browser.wait_for(lambda: _count(browser, names, "whole") == 6, timeout=30, what="the local copy's map")
            assert "local copy" in browser.evaluate("document.querySelector('header').innerText")
            browser.goto(f"http://127.0.0.1:{local_port}/waiting")
            browser.wait_js(f"!!document.querySelector('{row}')", timeout=30)
            lease = sched.kube.request(
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/{kube_mod.SYSTEM_NAMESPACE}/leases/{replica.lease_name}",
            )
            assert lease["spec"]["holderIdentity"] == replica.identity  # the local copy takes no lease
        finally:
            local.terminate()
            local.wait(30)
        assert local.returncode == 0

    print(
        f"\n[dashboard] gpusched dashboard answered {local_ready:.1f} s after its start (kernel warm-up included)"
        f"\n[dashboard] map opened in {opened:.2f} s; a binding shown {shown_after:.2f} s after kubectl saw it bound;"
        f" gang reason: {reason}\n[dashboard] screenshots in {shots}"
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_a_standby_sends_the_browser_to_the_leaders_dashboard(sched: Scenario) -> None:
    binary = chromium()
    sched.add_nodes([kube_mod.gpu_node("sb-0")])
    first, second = sched.gpusched("gpusched-0"), sched.gpusched("gpusched-1")
    ports = {}
    for replica in (first, second):
        ports[replica.identity] = free_port()
        replica.extra_args += [f"--dashboard-port={ports[replica.identity]}"]
    first.start().wait_ready().wait_leader()
    second.start().wait_ready()
    assert not second.is_leader()
    leader_url = f"http://127.0.0.1:{ports[first.identity]}"
    standby_url = f"http://127.0.0.1:{ports[second.identity]}"

    # The standby has read the leader's address on the Lease by its next retry: a redirect there.
    def sent() -> str | None:
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            opener.open(f"{standby_url}/queues", timeout=5)
        except urllib.error.HTTPError as answer:
            return answer.headers.get("Location") if answer.code == 302 else None
        return None

    location: str = kube_mod.wait_until(sent, timeout=30, what="the standby's redirect")
    assert location == f"{leader_url}/queues"
    with contextlib.closing(Browser(binary)) as browser:
        browser.goto(f"{standby_url}/")
        browser.wait_js("!!document.querySelector('[data-node=\"sb-0\"]')")
        assert browser.evaluate("location.href") == f"{leader_url}/"
        assert "leader" in browser.evaluate("document.querySelector('header').innerText")
