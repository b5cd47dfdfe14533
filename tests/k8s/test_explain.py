"""`gpusched explain`: answered by the running scheduler from its live state (/explain), and the command asking it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import explain, health
from tests.k8s.fakeapi import FakeApiServer
from tests.k8s.test_operator import flushed, node, pod, podgroup

GROUP = {"gpusched.io/pod-group": "job"}


@pytest.fixture
def operator(leader: Operator) -> Operator:
    """Explain is asked of the leader (conftest's ``leader``)."""
    return leader


def tainted(name: str, gpus: int) -> dict[str, object]:
    body = node(name, gpus)
    body["spec"] = {"taints": [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]}
    return body


async def test_a_pod_too_big_names_only_nodes_it_may_use(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.node_event(node("gpu-1", gpus=4))
    operator.node_event(tainted("gpu-2", gpus=8))
    operator.pod_event(pod("busy", 5, scheduler="default-scheduler", node_name="gpu-0"))
    operator.pod_event(pod("big", 6, cpu="2500m"))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "big")
    assert "nodes: 0 of 3 pass every filter" in text
    assert "the most free on one node it may use (taints, selectors, cordons considered): 4 (gpu-1)" in text
    assert "gpu-2)" not in text.split("GPUs:")[1]
    assert "queue default: waiting for a change in the cluster" in text


async def test_a_gang_member_says_it_waits_for_its_gang(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.podgroup_event(podgroup("job", 3))
    for i in range(2):
        operator.pod_event(pod(f"job-{i}", 1, labels=GROUP))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "job-0")
    assert "member of gang default/job (minMember 3): 0 placed, 2 exist" in text
    assert "nodes: 1 of 1 pass every filter" in text
    group = explain.answer(operator, "podgroup/job")
    assert group.splitlines()[0].startswith("podgroup default/job: minMember 3, 2 pending and 0 placed members")
    assert "waiting for members: 2 of the 3 still needed exist" in group


async def test_a_gang_that_cannot_fit_together(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=4))
    operator.node_event(node("gpu-1", gpus=4))
    operator.podgroup_event(podgroup("job", 3))
    for i in range(3):
        operator.pod_event(pod(f"job-{i}", 4, labels=GROUP))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "podgroup/job")
    assert "placing 3 members together now fails" in text
    assert operator.cache.pod("default/job-0") is None  # the what-if left nothing behind


async def test_a_queue_in_kubernetes_units(operator: Operator) -> None:
    operator.queue_event(
        {"metadata": {"name": "team-a"}, "spec": {"guaranteed": {"nvidia.com/gpu": "4", "memory": "256Gi"}}}
    )
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("a", 2, cpu="2500m", labels={"gpusched.io/queue": "team-a"}))
    operator.listed()
    operator.loop.run_until_idle()
    text = explain.answer(operator, "queue/team-a")
    assert "guarantee: memory 256Gi, nvidia.com/gpu 4; limit: none" in text
    assert "holds: cpu 2500m, nvidia.com/gpu 2" in text
    with pytest.raises(explain.NotFound):
        explain.answer(operator, "queue/nope")


async def test_the_endpoint_answers_from_the_leader_and_says_when_a_standby_is_asked(
    fake: FakeApiServer, operator: Operator, tmp_path: Path
) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("big", 9))
    operator.listed()
    operator.loop.run_until_idle()
    fake.tokens["alice-token"] = "alice"
    fake.rights |= {("alice", "get", "pods", "default"), ("alice", "get", "pods", "x")}
    token = tmp_path / "token"
    token.write_text("alice-token\n")
    servers = await health.serve(operator, health_port=0, metrics_port=0, host="127.0.0.1")
    url = f"http://127.0.0.1:{servers.health_port}"

    def asked(target: str, namespace: str) -> argparse.Namespace:
        return argparse.Namespace(target=target, namespace=namespace, url=url, timeout=5.0, token_file=str(token))

    try:
        args = asked("big", "default")
        code, text, _ = await explain._ask(args)
        assert code == 200 and text.startswith("pod default/big")
        code, text, _ = await explain._ask(asked("ghost", "x"))
        assert code == 404 and "not a pending pod" in text
        operator.set_leading(False)
        code, text, _ = await explain._ask(args)
        assert code == 503 and "standby" in text
    finally:
        await servers.close()


# --- explain runs the cycle's own filtering and what-if, and says whether the work waits or never fits -----------


def gang_pod(name: str, gpus: int, group: str = "job") -> dict[str, object]:
    return pod(name, gpus, labels={"gpusched.io/pod-group": group})


def run_gang(operator: Operator, name: str, members: int, gpus: int, **spec: object) -> str:
    """Create a PodGroup (``spec`` added to its spec) and its members, run the loop; the gang's Scheduled message."""
    group = podgroup(name, members)
    group["spec"].update(spec)
    operator.podgroup_event(group)
    for i in range(members):
        operator.pod_event(gang_pod(f"{name}-{i}", gpus, group=name))
    operator.listed()
    operator.loop.run_until_idle()
    job = operator.loop.gang(f"default/{name}")
    assert job is not None
    return job.conditions["Scheduled"].message


async def test_explain_counts_a_nominated_preemptor_on_its_node_as_the_cycle_does(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    operator.pod_event(pod("low", 8))
    operator.listed()
    operator.loop.run_until_idle()
    urgent = pod("urgent", 8)
    urgent["spec"]["priority"] = 100
    operator.pod_event(urgent)
    operator.loop.run_until_idle()  # evicts "low": gpu-0 is nominated for "urgent"
    operator.cache.remove_pod("default/low")  # gone, and "urgent" not tried again yet: gpu-0's GPUs are free
    operator.node_event(node("gpu-1", gpus=8))
    operator.pod_event(pod("theirs", 8, scheduler="default-scheduler", node_name="gpu-1"))
    operator.pod_event(pod("small", 1))
    operator.loop.run_until_idle()
    said = operator.conditions.said["default/small"]
    assert said.startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."), said
    text = explain.answer(operator, "small")
    # Explain runs the cycle's own filter: "urgent" (of higher priority) is counted on gpu-0 with the 8 GPUs it will
    # take there, so gpu-0 has none for "small"; without it, explain would say "small" fits there.
    assert "2 Insufficient nvidia.com/gpu: gpu-0, gpu-1" in text, text
    assert "it waits" in text and "Never fits" not in text


async def test_a_pod_larger_than_any_node_is_told_it_never_fits_not_to_wait(operator: Operator) -> None:
    for i in range(6):
        operator.node_event(node(f"gpu-{i}", gpus=8))
    operator.pod_event(pod("big", 9))
    operator.listed()
    operator.loop.run_until_idle()
    never = "Never fits as the cluster is: it asks 9 GPUs on one node and nodes have at most 8"
    said = operator.conditions.said["default/big"]
    # kube-scheduler's two sentences (every node smaller than the pod: no eviction helps; its DRA plugin's words
    # first, the profile has dra), then gpusched's.
    kube = "0/6 nodes are available: 6 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/6"
    kube += " nodes are available: 6 Preemption is not helpful for scheduling. "
    assert said.startswith(kube + never), said
    text = explain.answer(operator, "big")
    assert never in text and "it fits once a node large enough joins, or it asks for less" in text
    assert "must free up" not in text and "it waits" not in text


async def test_a_gang_member_kept_off_by_taints_is_told_which_taint_not_to_wait_for_gpus(operator: Operator) -> None:
    operator.node_event(tainted("gpu-0", gpus=8))
    operator.node_event(tainted("gpu-1", gpus=8))
    message = run_gang(operator, "job", 2, 2)
    never = (
        "Never fits as the cluster is: of the nodes with room for it, 2 node(s) had untolerated taint"
        " {maintenance: yes}; it fits there once it tolerates maintenance=yes:NoSchedule (or the taint is removed)."
    )
    text = explain.answer(operator, "job-0")
    assert never in text
    assert "must free up" not in text
    assert message.endswith(never)
    assert "0/2 nodes are available: 2 node(s) had untolerated taint {maintenance: yes}." in message
    group = explain.answer(operator, "podgroup/job")
    assert "placing 2 members together now fails: member job-0 of 2 fits nowhere: 0/2 nodes" in group
    assert group.count(never) == 2  # the condition, and the what-if that reaches the same


async def test_a_gang_larger_than_the_cluster_is_told_the_clusters_size(operator: Operator) -> None:
    for i in range(6):
        operator.node_event(node(f"gpu-{i}", gpus=8))
    operator.pod_event(pod("busy", 7, scheduler="default-scheduler", node_name="gpu-0"))
    message = run_gang(operator, "huge", 10, 8)
    never = (
        "Never fits as the cluster is: the job needs 80 whole GPUs and the cluster has 48 in all (at most 8 on a"
        " node); it fits once nodes join, or it asks for fewer members or GPUs."
    )
    assert message == never
    assert operator.conditions.said["default/huge-0"].endswith(never)
    assert f"placing 10 members together now fails: {never}" in explain.answer(operator, "podgroup/huge")


async def test_the_gang_what_if_keeps_the_topology_and_names_a_level_label_no_node_has(operator: Operator) -> None:
    for i in range(2):
        operator.node_event(node(f"gpu-{i}", gpus=8))
    message = run_gang(operator, "job", 2, 4, topology={"required": "rack"})
    never = (
        "Never fits as the cluster is: no node has the label network.topology.gpusched.io/rack of level rack; it fits"
        " once nodes are labelled"
    )
    assert message == never
    text = explain.answer(operator, "podgroup/job")
    # Before, the what-if ignored the topology: "a placement exists now ... or for its topology (TopologyConstraint(".
    assert f"placing 2 members together now fails: {never}" in text
    assert "a placement exists" not in text

    labelled = node("gpu-0", gpus=8)
    labelled["metadata"]["labels"] = {"network.topology.gpusched.io/rack": "r1"}
    operator.node_event(labelled)
    text = explain.answer(operator, "podgroup/job")
    assert "a placement exists now for 2 members (on gpu-0, inside its topology (required level rack))" in text


async def test_a_plain_pod_requiring_a_level_no_node_is_labelled_with_never_fits(operator: Operator) -> None:
    operator.node_event(node("gpu-0", gpus=8))
    raw = pod("ranked", 2)
    raw["metadata"]["annotations"] = {"gpusched.io/topology-required": "rack"}
    operator.pod_event(raw)
    operator.listed()
    operator.loop.run_until_idle()
    said = operator.conditions.said["default/ranked"]
    assert said == (
        "0/1 nodes are available: 1 node(s) outside the job's topology domain. no new claims to deallocate,"
        " preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod. Never fits as the"
        " cluster is: of the nodes with room for it, 1 node(s) outside the job's topology domain; it fits there once"
        " it runs on a node labelled network.topology.gpusched.io/rack (level rack; no node has it)."
    )
    assert said[said.index("Never fits") :] in explain.answer(operator, "ranked")


#: What a Python repr looks like in text meant for people: ``TopologyConstraint(required=...``, ``{'cpu': ...``,
#: ``np.int64(3)``, ``<scheduler.core.jobs.Job object at 0x...>``.
REPR = re.compile(r"\b[A-Z][A-Za-z0-9_]*\(|\{'|\['|\bnp\.[a-z0-9_]+\(|<[a-z_.]+ object at 0x|\bNone\b")


async def test_no_user_text_shows_a_python_repr(fake: FakeApiServer, operator: Operator) -> None:
    """Render what users read for a set of cases (every explain answer, every Event, PodScheduled message and
    gang condition) and look for reprs in it."""
    operator.queue_event({"metadata": {"name": "team-a"}, "spec": {"guaranteed": {"nvidia.com/gpu": "4"}}})
    operator.queue_event({"metadata": {"name": "capped"}, "spec": {"limit": {"nvidia.com/gpu": "1"}}})
    operator.node_event(node("gpu-0", gpus=8))
    operator.node_event(tainted("gpu-1", gpus=8))
    labelled = node("gpu-2", gpus=4)
    labelled["metadata"]["labels"] = {"network.topology.gpusched.io/rack": "r1", "pool": "a"}
    operator.node_event(labelled)
    operator.pod_event(pod("fits", 1, labels={"gpusched.io/queue": "team-a"}))
    operator.pod_event(pod("too-big", 9))
    operator.pod_event(pod("no-queue", 1, labels={"gpusched.io/queue": "nope"}))
    operator.pod_event(pod("no-group", 1, labels={"gpusched.io/pod-group": "ghost"}))
    selector = pod("selective", 1)
    selector["spec"]["nodeSelector"] = {"pool": "b"}
    operator.pod_event(selector)
    ranked = pod("ranked", 2)
    ranked["metadata"]["annotations"] = {"gpusched.io/topology-required": "block"}
    operator.pod_event(ranked)
    for name, members, gpus, topology in (
        ("huge", 3, 8, {}),
        ("racked", 2, 4, {"required": "rack"}),
        ("unracked", 2, 8, {"required": "rack", "preferred": "host"}),
        ("bad-level", 2, 1, {"required": "row"}),
        ("partial", 3, 1, {}),
    ):
        group = podgroup(name, members)
        group["spec"]["topology"] = topology
        operator.podgroup_event(group)
        for i in range(members if name != "partial" else 1):
            operator.pod_event(gang_pod(f"{name}-{i}", gpus, group=name))
    # A gang its queue's limit holds back while a placement inside its topology exists.
    capped = podgroup("capped", 2)
    capped["spec"].update(queue="capped", topology={"preferred": "host"})
    operator.podgroup_event(capped)
    for i in range(2):
        operator.pod_event(pod(f"capped-{i}", 1, labels={"gpusched.io/pod-group": "capped"}))
    operator.listed()
    operator.loop.run_until_idle()
    await flushed(operator)
    texts = [e["message"] for e in fake.events.values()]
    texts += list(operator.conditions.said.values())
    for job in operator.loop.jobs.gangs():
        texts += [c.message for c in job.conditions.values()]
        texts.append(explain.answer(operator, f"podgroup/{job.key.split('/', 1)[1]}"))
    for key in list(operator.pending):
        texts.append(explain.answer(operator, key.split("/", 1)[1]))
    texts += [explain.answer(operator, "queue/team-a"), explain.answer(operator, "queue/default")]
    found = {match.group(0): t for t in texts for match in REPR.finditer(t)}
    assert not found, found
    assert len(texts) > 30
    assert any("Never fits as the cluster is" in t for t in texts)
    assert any("inside its topology (preferred level host)" in t for t in texts)


async def test_explain_refuses_claims_a_profile_without_dra_cannot_allocate_as_the_cycle_does(
    client: k8s.Client,
) -> None:
    config = k8s_config.parse({"profile": {"plugins": ["node_rules", "fit", "gpu"]}})
    op = Operator(client, config, identity="leader-0")
    await op.start()
    op.set_leading(True)
    try:
        op.node_event(node("gpu-0", gpus=8))
        raw = pod("claims", 0)
        raw["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "c"}]
        op.pod_event(raw)
        op.listed()
        op.loop.run_until_idle()
        said = op.conditions.said["default/claims"]
        assert "has no dra plugin to allocate the pod's ResourceClaims" in said
        text = explain.answer(op, "claims")
        # Before explain ran the cycle's own filter, it skipped this check and said every node passed.
        assert "pass every filter" not in text
        assert f"  {said}" in text.splitlines()
    finally:
        await op.close()


async def test_a_member_after_its_gang_is_explained_inside_its_siblings_domain(operator: Operator) -> None:
    for name, rack in (("gpu-a", "r1"), ("gpu-b", "r2")):
        labelled = node(name, gpus=8)
        labelled["metadata"]["labels"] = {"network.topology.gpusched.io/rack": rack}
        operator.node_event(labelled)
    run_gang(operator, "job", 1, 8, topology={"required": "rack"})
    operator.pod_event(gang_pod("job-late", 8))
    operator.loop.run_until_idle()
    said = operator.conditions.said["default/job-late"]
    assert "1 node(s) outside the job's topology domain" in said, said
    text = explain.answer(operator, "job-late")
    # Before, explain left out the domain its placed sibling keeps it in and said the other rack's node passed.
    assert "nodes: 0 of 2 pass every filter" in text and "1 node(s) outside the job's topology domain" in text


async def test_explain_shows_the_move_plan_or_why_there_is_none(client: k8s.Client) -> None:
    config = k8s_config.parse({"profile": {"actions": ["allocate", "consolidate", "reclaim", "preempt"]}})
    op = Operator(client, config, identity="leader-1")
    await op.start()
    op.set_leading(True)
    try:
        for i, used in enumerate((7, 6, 7)):
            op.node_event(node(f"gpu-{i}", gpus=8))
            for j in range(used):
                raw = pod(f"w{i}-{j}", 1, node_name=f"gpu-{i}")
                raw["metadata"]["ownerReferences"] = [
                    {"kind": "ReplicaSet", "name": "rs", "uid": "rs", "controller": True}
                ]
                op.pod_event(raw)
        op.pod_event(pod("big", 4))
        op.pod_event(pod("huge", 8))
        op.listed()
        # Not run by the loop: explain runs the action's own search, and nothing is moved by asking.
        text = explain.answer(op, "big")
        assert "consolidation would move 2 pod(s) (2 GPUs): default/w1-" in text, text
        assert "then default/big on gpu-1" in text
        huge = explain.answer(op, "huge")
        assert "consolidation cannot make room: the job needs 8 GPUs and the cluster has 4 free" in huge
        assert all(op.cache.pod(f"default/w1-{j}") is not None for j in range(6))
    finally:
        await op.close()


def _segment_member(name: str, index: int) -> dict[str, object]:
    labels = {"gpusched.io/pod-group": "seg", "batch.kubernetes.io/job-completion-index": str(index)}
    return pod(name, 4, labels=labels)


async def test_a_member_of_a_segment_made_again_is_explained_inside_its_segment_s_clique(operator: Operator) -> None:
    """Two one-node cliques of 12 GPUs; 4 members x 4 GPUs in segments of 2 required on a clique: one segment per
    clique. Member 1 is lost, another scheduler's 5-GPU pod takes its room, and it is made again: its own clique has 3
    GPUs free, the other clique 4, but a member of a segment whose others run may only join them, as its cycle says.
    Before, explain left the segment out and said the other clique's node passed."""
    for name, clique in (("gpu-x", "X"), ("gpu-y", "Y")):
        labelled = node(name, gpus=12)
        labelled["metadata"]["labels"] = {"nvidia.com/gpu.clique": clique}
        operator.node_event(labelled)
    group = podgroup("seg", 4)
    group["spec"]["segments"] = {"size": 2, "required": "clique"}
    operator.podgroup_event(group)
    for i in range(4):
        operator.pod_event(_segment_member(f"seg-{i}", i))
    operator.listed()
    operator.loop.run_until_idle()
    first = operator.cache.pod("default/seg-1")
    assert first is not None
    home = operator.cache.snapshot().names[first.placement.slot]
    assert home is not None
    lost = _segment_member("seg-1", 1)
    lost["spec"]["nodeName"] = home  # type: ignore[index]
    operator.pod_event(lost, deleted=True)
    operator.pod_event(pod("theirs", 5, scheduler="default-scheduler", node_name=home))
    operator.pod_event(_segment_member("seg-1b", 1))
    operator.loop.run_until_idle()
    assert operator.cache.pod("default/seg-1b") is None
    text = explain.answer(operator, "seg-1b")
    assert "nodes: 0 of 2 pass every filter" in text, text
    # Why the other clique's node is out: the member's own segment holds it there.
    assert (
        "  segment 1 of 2 (spec.segments: 2 members each, required in one clique): the other members of its segment"
        f" run on {home}, so it may use only clique X (nvidia.com/gpu.clique=X)" in text.splitlines()
    ), text
    # The gang's condition says what it waits for: that member's room, not members (before: "3 of 4 members exist").
    job = operator.loop.gang("default/seg")
    assert job is not None
    scheduled = job.conditions["Scheduled"]
    assert scheduled.reason == "NotAllMembersFit", scheduled
    assert scheduled.message.startswith("pod default/seg-1b, the member it waits for: 0/2 nodes"), scheduled
    # The gang's own what-if puts the member back in its segment too (before: a placement "exists" on gpu-y).
    group_text = explain.answer(operator, "podgroup/seg")
    assert "placing 1 members together now fails" in group_text, group_text
