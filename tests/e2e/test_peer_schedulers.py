"""The peer cases of benchmarks/e2e_throughput.py still describe what each peer schedules: each gang as that
peer spells it, pods named for that peer's scheduler, the configurations the peers are started with. No cluster
and no peer binary needed (those are for the benchmark itself); well under a second."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import yaml

from tests.e2e import kube
from tests.e2e import peer_schedulers as peers


def _group_of(peer: str, pod: dict) -> str:
    """The gang a pod says it belongs to, read the way ``peer``'s scheduler reads it."""
    meta = pod["metadata"]
    if peer == "volcano":
        return str(meta.get("annotations", {}).get(peers.VOLCANO_GROUP_ANNOTATION, ""))
    if peer == "coscheduling":
        return str(meta.get("labels", {}).get(peers.COSCHEDULING_GROUP_LABEL, ""))
    return str(meta.get("labels", {}).get(kube.LABEL_POD_GROUP, ""))


@pytest.mark.parametrize("peer", peers.PEERS)
def test_every_gang_is_a_podgroup_of_the_peers_api_with_its_members_named_for_the_peer(peer: str) -> None:
    groups, pods = peers.gang_workload(peer, gangs=3, gang_size=4, namespace="bench")

    assert len(groups) == 3 and len(pods) == 12
    api_group = {"gpusched": kube.GROUP, "volcano": peers.VOLCANO_GROUP, "coscheduling": peers.COSCHEDULING_GROUP}
    for path, group in groups:
        assert group["kind"] == "PodGroup"
        assert group["apiVersion"].split("/")[0] == api_group[peer]
        assert path == f"/apis/{group['apiVersion']}/namespaces/bench/podgroups"
        assert group["spec"]["minMember"] == 4
    members = Counter(_group_of(peer, p) for p in pods)
    assert members == {g["metadata"]["name"]: 4 for _, g in groups}
    for pod in pods:
        assert pod["spec"]["schedulerName"] == peers.scheduler_name(peer)
        assert kube.whole_gpus_of(pod) == 1


def test_volcano_gangs_name_a_queue_since_no_webhook_defaults_it() -> None:
    groups, _ = peers.gang_workload("volcano", gangs=1, gang_size=8, namespace="bench")
    queues = {q["metadata"]["name"] for q in peers.volcano_queues()}
    assert groups[0][1]["spec"]["queue"] == peers.VOLCANO_QUEUE
    assert queues == {"root", peers.VOLCANO_QUEUE}


@pytest.mark.parametrize("peer", ["volcano", "coscheduling"])
def test_single_pods_belong_to_no_gang_and_go_to_the_peer(peer: str) -> None:
    pods = peers.single_pods(peer, 5)
    assert len({p["metadata"]["name"] for p in pods}) == 5
    assert all(p["spec"]["schedulerName"] == peers.scheduler_name(peer) for p in pods)
    assert not any(_group_of(peer, p) for p in pods)


def test_coscheduling_profile_answers_to_its_pods_with_coscheduling_and_matched_client_limits() -> None:
    config = peers.coscheduling_config("/tmp/admin.kubeconfig", qps=1000, burst=2000)

    assert config["clientConnection"] == {"kubeconfig": "/tmp/admin.kubeconfig", "qps": 1000.0, "burst": 2000}
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == peers.scheduler_name("coscheduling")
    assert profile["plugins"]["queueSort"]["enabled"] == [{"name": "Coscheduling"}]
    assert {"name": "Coscheduling"} in profile["plugins"]["multiPoint"]["enabled"]


def test_volcano_runs_its_default_actions_with_the_gang_plugin() -> None:
    conf = yaml.safe_load(peers.VOLCANO_SCHEDULER_CONF)
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "backfill"]
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert {"gang", "predicates", "proportion", "nodeorder"} <= set(plugins)


def test_the_benchmark_runs_each_peer_case_with_that_peers_gangs() -> None:
    from benchmarks import e2e_throughput as bench

    assert set(bench.PEER_OF) | set(bench.GANGS_OF) <= set(bench.CASES)
    for case, peer in bench.GANGS_OF.items():
        assert peer in peers.PEERS
        assert case == "gangs" or bench.PEER_OF[case] == peer
    # Both pairs are compared in the printed ratios once they ran.
    result = bench.Result(case="x", pods=8, bound=8, seconds=2.0, pods_per_s=4.0, p50_s=1.0, p99_s=2.0)
    slower = bench.Result(case="y", pods=8, bound=8, seconds=4.0, pods_per_s=2.0, p50_s=1.0, p99_s=2.0)
    lines = bench.peer_ratios({"gangs": result, "volcano-gangs": slower, "coscheduling-gangs": "not run: why"})
    assert lines == ["gangs / volcano-gangs: 2.00x pods/s"]
    # And the rate once each was running (from its own first bind), where the script could measure it.
    result = dataclasses.replace(result, running_pods_per_s=6.0)
    slower = dataclasses.replace(slower, running_pods_per_s=4.0)
    lines = bench.peer_ratios({"gangs": result, "volcano-gangs": slower})
    assert lines == ["gangs / volcano-gangs: 2.00x pods/s, 1.50x after each one's first bind"]
