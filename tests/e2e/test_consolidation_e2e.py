"""Consolidation on a real API server (issue 27): three kwok nodes of 8 GPUs filled by 1-GPU pods of Deployments,
each under a PodDisruptionBudget (maxUnavailable 1); a 4-GPU pod, and a gang of two 4-GPU pods, find room only by
moving pods; under one budget of maxUnavailable 1 over every pod that may move, the two moves a 4-GPU pod needs
are carried out one after the other (issue 46). Checked as a user would: each binds within 60 s (120 s for the
moves in steps), no budget is ever breached, pods annotated ``gpusched.io/consolidation: never`` and pods of a
Queue that allows no moves are never evicted, every moved pod runs again (its Deployment's new pod), and nothing
is lost; a budget that allows no disruption leaves everything as it was, with the reason on the pending pod. See
docs/consolidation.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Scenario, node_of, phase_of

pytestmark = pytest.mark.e2e

CONSOLIDATING = {"profile": {"actions": ["allocate", "consolidate", "reclaim", "preempt"]}}
#: Short leases so that a failover takes seconds.
FAST_LEASE = {"leaderElection": {"leaseDurationSeconds": 4, "renewDeadlineSeconds": 3, "retryPeriodSeconds": 1}}
#: A finalizer that keeps a moved pod terminating (on its node) until the test lets it go.
FINALIZER = "gpusched.io/e2e-hold"
NODES = ("cons-0", "cons-1", "cons-2")
#: Deployments whose pods may move, one annotated never, one in a Queue that allows no moves.
KEEP, FIXED = "keep", "fixed"
#: The label of the pods under one budget (``_fill(one_budget=True)``), and that budget's name.
MOVABLE = "movable"


def _deployments(s: Scenario) -> str:
    return f"/apis/apps/v1/namespaces/{s.namespace}/deployments"


def _deployment(
    s: Scenario, name: str, replicas: int, queue: str, *, held: bool = False, labels: Mapping[str, str] | None = None
) -> None:
    template = kube_mod.pod(name, gpus=1, labels={"app": name, kube_mod.OWNER_LABEL: s.name, **(labels or {})})
    if held:
        template["metadata"]["finalizers"] = [FINALIZER]
    if name == FIXED:
        template["metadata"]["labels"]["gpusched.io/queue"] = queue
    if name == KEEP:
        template["metadata"]["annotations"]["gpusched.io/consolidation"] = "never"
    del template["metadata"]["name"]
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }
    s.kube.request("POST", _deployments(s), body)


def _patch(s: Scenario, path: str, body: Mapping[str, Any]) -> None:
    s.kube.request("PATCH", path, body, content_type="application/merge-patch+json")


def _scale(s: Scenario, name: str, replicas: int) -> None:
    _patch(s, f"{_deployments(s)}/{name}", {"spec": {"replicas": replicas}})


def _budget(s: Scenario, name: str, max_unavailable: int, *, selector: Mapping[str, str] | None = None) -> None:
    """A budget over the pods labelled ``selector`` (by default Deployment ``name``'s)."""
    s.kube.request(
        "POST",
        f"/apis/policy/v1/namespaces/{s.namespace}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": selector or {"app": name}}},
        },
    )


def _budgets(s: Scenario, name: str = "") -> Any:
    path = f"/apis/policy/v1/namespaces/{s.namespace}/poddisruptionbudgets"
    return s.kube.request("GET", f"{path}/{name}" if name else path)


def _stays(s: Scenario, reason: str) -> str:
    """A 4-GPU pod ``big`` comes; it gets Event ``reason`` and stays pending, and every pod stays the same pod.
    Returns the Event's message."""
    before = {p["metadata"]["uid"] for p in _running(s)}
    s.create_pod(kube_mod.pod("big", gpus=4))
    told: str = s.wait_event("big", reason)["message"]
    s.stays_unbound(["big"], 5)
    assert {p["metadata"]["uid"] for p in _running(s)} == before
    return told


def _cordon(s: Scenario, node: str, unschedulable: bool) -> None:
    _patch(s, f"/api/v1/nodes/{node}", {"spec": {"unschedulable": unschedulable}})


def _running(s: Scenario) -> list[dict[str, Any]]:
    return [
        p for p in s.pods() if node_of(p) and phase_of(p) == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _fill(
    s: Scenario,
    layout: list[Mapping[str, int]],
    queue: str,
    *,
    budgets: bool,
    held: tuple[str, ...] = (),
    one_budget: bool = False,
) -> dict[str, int]:
    """Fill the nodes one at a time (the others cordoned) with the Deployments' pods of ``layout`` (per node, the
    pods each Deployment has there); with ``budgets`` every Deployment gets one of maxUnavailable 1; with
    ``one_budget`` one budget of maxUnavailable 1 (:data:`MOVABLE`) selects every pod that may move (all but
    :data:`KEEP`'s and :data:`FIXED`'s). Returns the replicas."""
    replicas: dict[str, int] = {}
    for i, node in enumerate(NODES):
        for other in NODES:
            _cordon(s, other, other != node)
        for name, count in layout[i].items():
            if name in replicas:
                replicas[name] += count
                _scale(s, name, replicas[name])
            else:
                replicas[name] = count
                labels = {MOVABLE: "yes"} if one_budget and name not in (KEEP, FIXED) else None
                _deployment(s, name, count, queue, held=name in held, labels=labels)
        want = sum(replicas.values())
        kube_mod.wait_until(
            lambda want=want: len(_running(s)) == want or None,  # type: ignore[misc]
            timeout=60,
            what=f"{want} pods Running",
            describe=s.describe,
        )
    for node in NODES:
        _cordon(s, node, False)
    for name in replicas if budgets else ():
        _budget(s, name, 1)
    if one_budget:
        _budget(s, MOVABLE, 1, selector={MOVABLE: "yes"})
    return replicas


def _setup(
    s: Scenario,
    layout: list[Mapping[str, int]],
    *,
    budgets: bool = True,
    schedulers: int = 1,
    held: tuple[str, ...] = (),
    config: Mapping[str, Any] = CONSOLIDATING,
    one_budget: bool = False,
) -> tuple[dict[str, int], dict[str, str]]:
    """The nodes, the Queue that allows no moves, the Deployments (those in ``held`` with a finalizer); gpusched
    started with consolidation on (``schedulers`` replicas). Returns the replicas and the uid -> name of every pod
    that must never be evicted."""
    queue = f"{s.name}-nomove"[:63]
    spec = kube_mod.queue(queue)
    spec["spec"]["consolidation"] = {"moves": "Never"}
    s.create_queue(spec)
    s.add_nodes([kube_mod.gpu_node(n, gpus=8) for n in NODES])
    if schedulers == 1:
        s.start_gpusched(config=config)
    else:
        started = [s.gpusched(f"replica-{i}", config={**config, **FAST_LEASE}).start() for i in range(2)]
        for replica in started:
            replica.wait_ready()
        kube_mod.wait_until(lambda: any(r.is_leader() for r in started), timeout=60, what="a replica leading")
    replicas = _fill(s, layout, queue, budgets=budgets, held=held, one_budget=one_budget)
    kept = {
        p["metadata"]["uid"]: p["metadata"]["name"]
        for p in _running(s)
        if p["metadata"]["labels"].get("app") in (KEEP, FIXED)
    }
    used = {n: 0 for n in NODES}
    for p in _running(s):
        used[node_of(p)] += 1
    assert [used[n] for n in NODES] == [sum(c.values()) for c in layout], used
    return replicas, kept


def _watch_budgets(s: Scenario, replicas: Mapping[str, int], names: list[str]) -> list[dict[str, Any]] | None:
    """One look: no Deployment has two pods unavailable (a PDB breached); the named pods, once all Running."""
    pods = s.pods()
    available: dict[str, int] = {}
    for p in pods:
        app = p["metadata"]["labels"].get("app")
        if app and node_of(p) and phase_of(p) == "Running" and not p["metadata"].get("deletionTimestamp"):
            available[app] = available.get(app, 0) + 1
    for app, want in replicas.items():
        assert available.get(app, 0) >= want - 1, f"{app}: {available.get(app, 0)} of {want} available\n{s.describe()}"
    wanted = [p for p in pods if p["metadata"]["name"] in names and node_of(p) and phase_of(p) == "Running"]
    return wanted if len(wanted) == len(names) else None


def _after(s: Scenario, replicas: Mapping[str, int], kept: Mapping[str, str], moved: int) -> None:
    """Every Deployment runs all its pods again, the kept pods are the same pods, nothing is over-committed."""
    kube_mod.wait_until(
        lambda: (
            _watch_budgets(s, replicas, []) is not None
            and all(
                sum(1 for p in _running(s) if p["metadata"]["labels"].get("app") == app) == want
                for app, want in replicas.items()
            )
        ),
        timeout=60,
        what="every Deployment's pods Running",
        describe=s.describe,
    )
    uids = {p["metadata"]["uid"] for p in _running(s)}
    assert set(kept) <= uids, f"evicted: {[kept[u] for u in set(kept) - uids]}"
    events = [e for e in s.kube.events(s.namespace) if e.get("reason") == "Moved"]
    assert len(events) == moved, [(e["involvedObject"]["name"], e["message"]) for e in events]
    assert all(e["involvedObject"]["name"] not in kept.values() for e in events)
    kube_mod.check_no_overcommit(s.pods(), s.my_nodes())


def test_a_four_gpu_pod_binds_by_moving_two_pods_and_a_strict_budget_first_keeps_everything(sched: Scenario) -> None:
    layout = [{"a": 3, KEEP: 2, FIXED: 2}, {"c": 2, "d": 2, KEEP: 1, FIXED: 1}, {"e": 3, KEEP: 2, FIXED: 2}]
    replicas, kept = _setup(sched, layout)
    # First the budgets of the pods on cons-1 allow no disruption: no plan, nothing moves, the pod says why.
    for name in ("c", "d"):
        _patch(
            sched,
            f"/apis/policy/v1/namespaces/{sched.namespace}/poddisruptionbudgets/{name}",
            {"spec": {"maxUnavailable": 0}},
        )
    kube_mod.wait_until(
        lambda: all(
            b.get("status", {}).get("disruptionsAllowed") == 0 and b["status"].get("observedGeneration") == 2
            for b in _budgets(sched)["items"]
            if b["metadata"]["name"] in ("c", "d")
        ),
        timeout=60,
        what="strict budgets observed",
        describe=sched.describe,
    )
    told = _stays(sched, "NoMovePlan")
    assert "PodDisruptionBudget" in told, told
    assert not [e for e in sched.kube.events(sched.namespace) if e.get("reason") == "Moved"]

    # maxUnavailable 1 again: two pods of two Deployments move off cons-1, the pod binds there.
    for name in ("c", "d"):
        _patch(
            sched,
            f"/apis/policy/v1/namespaces/{sched.namespace}/poddisruptionbudgets/{name}",
            {"spec": {"maxUnavailable": 1}},
        )
    (big,) = kube_mod.wait_until(
        lambda: _watch_budgets(sched, replicas, ["big"]),
        timeout=60,
        what="big Running after moves",
        describe=sched.describe,
        interval=0.2,
    )
    assert node_of(big) == "cons-1", node_of(big)
    assert "move 2 pod(s)" in sched.wait_event("big", "Consolidating")["message"]
    _after(sched, replicas, kept, moved=2)


#: Issue 46's cluster: 8 single-replica Deployments (w0 ... w7) whose pods may move, 2, 4 and 2 per node, under one
#: budget of maxUnavailable 1; the other pods may not move; 1, 2 and 1 GPUs free. A 4-GPU pod needs two of cons-1's
#: pods moved, and the budget allows one eviction at a time.
WEB = tuple(f"w{i}" for i in range(8))
ONE_BUDGET_LAYOUT = [
    {**dict.fromkeys(WEB[:2], 1), KEEP: 3, FIXED: 2},
    {**dict.fromkeys(WEB[2:6], 1), KEEP: 1, FIXED: 1},
    {**dict.fromkeys(WEB[6:], 1), KEEP: 3, FIXED: 2},
]


def _one_budget_allows_one(s: Scenario) -> None:
    kube_mod.wait_until(
        lambda: _budgets(s, MOVABLE).get("status", {}).get("disruptionsAllowed") == 1,
        timeout=60,
        what="the budget allowing one disruption",
        describe=s.describe,
    )


def _big_within_the_budget(s: Scenario, replicas: Mapping[str, int]) -> list[dict[str, Any]] | None:
    """One look: never two of the budget's pods unavailable; big, once Running."""
    up = [p for p in _running(s) if p["metadata"]["labels"].get(MOVABLE) == "yes"]
    assert len(up) >= len(WEB) - 1, f"{len(up)} of {len(WEB)} pods under the budget available\n{s.describe()}"
    return _watch_budgets(s, replicas, ["big"])


def test_two_moves_under_one_budget_of_max_unavailable_one_are_carried_out_one_after_the_other(
    sched: Scenario,
) -> None:
    replicas, kept = _setup(sched, ONE_BUDGET_LAYOUT, budgets=False, one_budget=True)
    _one_budget_allows_one(sched)
    sched.create_pod(kube_mod.pod("big", gpus=4))
    (big,) = kube_mod.wait_until(
        lambda: _big_within_the_budget(sched, replicas),
        timeout=120,
        what="big Running after two moves",
        describe=sched.describe,
    )
    assert node_of(big) == "cons-1", node_of(big)
    told = sched.wait_event("big", "Consolidating")["message"]
    assert "move 2 pod(s)" in told and "one at a time" in told, told
    _after(sched, replicas, kept, moved=2)
    reasons = {e.get("reason") for e in sched.kube.events(sched.namespace)}
    assert "ConsolidationAbandoned" not in reasons, reasons


def test_a_gang_of_two_four_gpu_pods_binds_by_moving_one_pod_off_two_nodes(sched: Scenario) -> None:
    layout = [{"a": 3, KEEP: 2}, {"c": 2, "d": 2, KEEP: 1, FIXED: 1}, {"e": 3, FIXED: 2}]
    replicas, kept = _setup(sched, layout)
    sched.create_podgroup(kube_mod.podgroup("pair", min_member=2))
    for i in range(2):
        sched.create_pod(kube_mod.pod(f"pair-{i}", gpus=4, group="pair"))
    pair = kube_mod.wait_until(
        lambda: _watch_budgets(sched, replicas, ["pair-0", "pair-1"]),
        timeout=60,
        what="the gang Running after moves",
        describe=sched.describe,
        interval=0.2,
    )
    assert sorted(node_of(p) for p in pair) == ["cons-0", "cons-2"]
    _after(sched, replicas, kept, moved=2)


def test_a_budget_with_an_empty_selector_is_weighed_as_the_eviction_api_weighs_it(sched: Scenario) -> None:
    layout = [{"a": 3, KEEP: 2, FIXED: 2}, {"c": 2, "d": 2, KEEP: 1, FIXED: 1}, {"e": 3, KEEP: 2, FIXED: 2}]
    replicas, _ = _setup(sched, layout, budgets=False)
    # A budget with an empty selector: the Eviction API applies it to every pod of the namespace (and allows no
    # disruption), and the plan search reads it the same way: no plan is made, no eviction is asked, nothing moves.
    # (A refusal the search could not foresee abandons the plan: tests/core/test_consolidate.py.)
    sched.kube.request(
        "POST",
        f"/apis/policy/v1/namespaces/{sched.namespace}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "everything"},
            "spec": {"maxUnavailable": 0, "selector": {}},
        },
    )
    kube_mod.wait_until(
        lambda: "disruptionsAllowed" in _budgets(sched, "everything").get("status", {}),
        timeout=60,
        what="the budget observed",
        describe=sched.describe,
    )
    told = _stays(sched, "NoMovePlan")
    assert "PodDisruptionBudget" in told, told
    reasons = {e.get("reason") for e in sched.kube.events(sched.namespace)}
    assert not reasons & {"Moved", "Consolidating", "ConsolidationAbandoned"}, reasons
    assert len(_running(sched)) == sum(replicas.values())
    kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())
    # Nothing is held: a 1-GPU pod binds.
    sched.create_pod(kube_mod.pod("small", gpus=1))
    sched.wait_bound(["small"], timeout=60)


def _let_go(s: Scenario) -> None:
    """Remove the test's finalizer from every pod that has it (they go, if deleted)."""
    for p in s.pods():
        if FINALIZER in (p["metadata"].get("finalizers") or []):
            with contextlib.suppress(kube_mod.APIError):
                _patch(
                    s, kube_mod.Kube.pods_path(s.namespace, p["metadata"]["name"]), {"metadata": {"finalizers": None}}
                )


def test_a_leader_killed_in_the_middle_of_a_plan_loses_no_pod_and_binds_nothing_twice(sched: Scenario) -> None:
    layout = [{"a": 3, KEEP: 2, FIXED: 2}, {"c": 2, "d": 2, KEEP: 1, FIXED: 1}, {"e": 3, KEEP: 2, FIXED: 2}]
    watcher = kube_mod.PodWatcher(sched.kube, sched.namespace).start()
    try:
        replicas, kept = _setup(sched, layout, schedulers=2, held=("c", "d"))
        (leader,) = [r for r in sched.schedulers if r.is_leader()]
        sched.create_pod(kube_mod.pod("big", gpus=4))
        sched.wait_event("big", "Consolidating")

        def leaving() -> list[str]:
            return [p["metadata"]["name"] for p in sched.pods() if p["metadata"].get("deletionTimestamp")]

        # The moved pods are evicted and held on cons-1 by the finalizer: the plan is half done. Kill its leader.
        kube_mod.wait_until(
            lambda: len(leaving()) == 2, timeout=30, what="2 moved pods leaving", describe=sched.describe
        )
        assert not node_of(sched.pod("big"))
        leader.kill()
        (standby,) = [r for r in sched.schedulers if r is not leader]
        standby.wait_leader(timeout=30)
        _let_go(sched)
        (big,) = kube_mod.wait_until(
            lambda: _watch_budgets(sched, replicas, ["big"]),
            timeout=60,
            what="big Running after the failover",
            describe=sched.describe,
        )
        assert node_of(big) == "cons-1", node_of(big)
        _after(sched, replicas, kept, moved=2)
        twice = {h["name"]: sorted(h["nodes"]) for h in watcher.snapshot().values() if len(h["nodes"]) > 1}
        assert not twice, f"bound to two nodes: {twice}"
    finally:
        watcher.stop()
        _let_go(sched)


def test_a_leader_killed_between_the_steps_of_a_plan_takes_no_further_step_and_nothing_moves_twice(
    sched: Scenario,
) -> None:
    local = sched.kube.local
    if local is None:
        pytest.skip("pausing the controller manager needs the suite's own control plane (not GPUSCHED_E2E_KUBECONFIG)")
    watcher = kube_mod.PodWatcher(sched.kube, sched.namespace).start()
    try:
        replicas, kept = _setup(sched, ONE_BUDGET_LAYOUT, budgets=False, one_budget=True, schedulers=2, held=WEB)
        _one_budget_allows_one(sched)
        (leader,) = [r for r in sched.schedulers if r.is_leader()]
        (standby,) = [r for r in sched.schedulers if r is not leader]
        web = {p["metadata"]["uid"] for p in _running(sched) if p["metadata"]["labels"].get(MOVABLE) == "yes"}

        def leaving() -> list[str]:
            return [p["metadata"]["name"] for p in sched.pods() if p["metadata"].get("deletionTimestamp")]

        # With the controller manager paused, the first step's pod is evicted (the API server counts it in the
        # budget: it allows none now) and no replacement comes: the plan stands between its steps. Kill its leader.
        with local.controllers_paused():
            sched.create_pod(kube_mod.pod("big", gpus=4))
            (first,) = kube_mod.wait_until(
                leaving, timeout=60, what="the first moved pod leaving", describe=sched.describe
            )
            leader.kill()
            standby.wait_leader(timeout=30)
        _let_go(sched)
        (big,) = kube_mod.wait_until(
            lambda: _big_within_the_budget(sched, replicas),
            timeout=120,
            what="big Running after the failover",
            describe=sched.describe,
        )
        assert node_of(big) == "cons-1", node_of(big)
        # Two pods moved in all: the old leader's first step, and one by the new leader's own plan (the old plan's
        # second step never taken); every Deployment runs again; no pod bound to two nodes.
        moved = web - {p["metadata"]["uid"] for p in _running(sched)}
        assert len(moved) == 2, sorted(moved)
        by = sorted(
            (e.get("reportingInstance", ""), e["involvedObject"]["name"])
            for e in sched.kube.events(sched.namespace)
            if e.get("reason") == "Moved"
        )
        assert [i for i, _ in by] == sorted([leader.identity, standby.identity]), by
        assert (leader.identity, first) in by, by
        kube_mod.wait_until(
            lambda: len(_running(sched)) == sum(replicas.values()) + 1,
            timeout=60,
            what="every Deployment's pods Running",
            describe=sched.describe,
        )
        assert set(kept) <= {p["metadata"]["uid"] for p in _running(sched)}
        kube_mod.check_no_overcommit(sched.pods(), sched.my_nodes())
        twice = {h["name"]: sorted(h["nodes"]) for h in watcher.snapshot().values() if len(h["nodes"]) > 1}
        assert not twice, f"bound to two nodes: {twice}"
    finally:
        watcher.stop()
        _let_go(sched)


def test_background_defragmentation_empties_the_emptiest_node_when_nothing_waits(sched: Scenario) -> None:
    profile = {"actions": ["allocate", "consolidate"], "consolidation": {"defragmentEverySeconds": 5}}
    replicas, kept = _setup(sched, [{"a": 3, KEEP: 3}, {"c": 3, FIXED: 3}, {"e": 1}], config={"profile": profile})
    # cons-2 holds one pod that may move: it goes, and cons-2 is whole for the next big job.
    kube_mod.wait_until(
        lambda: (
            _watch_budgets(sched, replicas, []) is not None
            and not [p for p in sched.pods() if node_of(p) == "cons-2"]
            and len(_running(sched)) == sum(replicas.values())
        ),
        timeout=60,
        what="cons-2 emptied, every pod Running",
        describe=sched.describe,
    )
    # Events of a node live in "default", as kube's do.
    told = kube_mod.wait_until(
        lambda: [
            e["message"]
            for e in sched.kube.events("default", name="cons-2", kind="Node")
            if e.get("reason") == "Consolidating"
        ],
        timeout=30,
        what="Consolidating on node cons-2",
    )
    assert "move 1 pod(s)" in told[-1], told
    _after(sched, replicas, kept, moved=1)
