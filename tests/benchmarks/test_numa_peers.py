"""benchmarks/numa_peers.py without a cluster: the setup every scheduler gets, the judging of its bindings, the
fingerprint scheduler-plugins' overreserve cache checks, and the peer's configurations."""

from __future__ import annotations

from benchmarks import numa_peers
from benchmarks.numa_peers import GPU, Binding
from tests.e2e import peer_schedulers


def test_the_objects_show_the_fragments_in_their_zones_and_the_stream_is_guaranteed() -> None:
    w = numa_peers.workload(nodes=8, pods=24)
    assert len(w.stream) == 24 and len(w.nodes) == 8
    free = {node: [zone[GPU] for zone in w.free(node)] for node in w.nodes}
    assert free["numa-03"] == [1, 4] and free["numa-05"] == [2, 2] and free["numa-07"] == [4, 4]
    for f in w.fragments:  # each fragment's GPUs are in the zone it is counted in
        assert {numa_peers.zone_of_gpu(i) for i in f.gpu_ids} <= {f.zone}
    nrt = numa_peers.nrt_manifest("numa-03", w.free("numa-03"), policy="restricted", pods=[("numa", "numa-03-held-0")])
    attributes = {a["name"]: a["value"] for a in nrt["attributes"]}
    assert attributes["topologyManagerPolicy"] == "restricted"
    available = [{r["name"]: r["available"] for r in zone["resources"]} for zone in nrt["zones"]]
    assert [a[GPU] for a in available] == ["1", "4"] and available[0]["cpu"] == "26"
    pod = numa_peers.pod_manifest("p", gpus=2, cpus=8, scheduler_name="x")
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["requests"] == container["resources"]["limits"]  # Guaranteed


def test_a_binding_to_a_zone_the_objects_show_taken_is_refused_and_gpus_outside_the_kubelets_zone_are_told() -> None:
    w = numa_peers.workload(nodes=8, pods=24)
    pod_2 = w.stream[2]  # 4 GPUs
    assert pod_2.gpus == 4
    bindings = [
        Binding(w.stream[0].name, "numa-07", (5,)),  # 1 GPU: the kubelet takes it from zone 0
        Binding(pod_2.name, "numa-05"),  # 2 + 2 GPUs free: no zone holds 4
        Binding(w.stream[1].name, "numa-07", (0, 1)),  # 2 GPUs in zone 0, as the kubelet gives them
    ]
    out = numa_peers.judge(w, numa_peers.Played(bindings, {}, 0), case="x", policy="single-numa-node")
    assert out.bound == 3 and [r[0] for r in out.refused] == [pod_2.name]
    assert out.gpus_named == 2 and out.gpus_in_zone == 1
    assert out.gpus_elsewhere == [(w.stream[0].name, "numa-07", (5,), {0: 1})]
    # Every pod but the three was left unbound though some node could take it.
    assert len(out.missed) > 0 and pod_2.name not in out.missed


def test_first_fit_admits_a_pod_no_zone_holds_only_under_restricted() -> None:
    w = numa_peers.Workload(nodes=("n",), fragments=(), stream=(numa_peers.StreamPod("six", 6, 12),))
    assert numa_peers.first_fit(w, "single-numa-node") == 0
    assert numa_peers.first_fit(w, "restricted") == 1


def test_the_peer_runs_node_resource_topology_match_with_the_cache_asked_for() -> None:
    plain = peer_schedulers.nrt_config("/k", scoring="LeastNUMANodes", resync_seconds=None)
    (profile,) = plain["profiles"]
    assert profile["schedulerName"] == peer_schedulers.NRT_SCHEDULER_NAME
    assert profile["plugins"]["multiPoint"]["enabled"] == [{"name": "NodeResourceTopologyMatch"}]
    (config,) = profile["pluginConfig"]
    assert config["args"] == {"scoringStrategy": {"type": "LeastNUMANodes"}}
    overreserve = peer_schedulers.nrt_config("/k", scoring="MostAllocated", resync_seconds=5)
    assert overreserve["profiles"][0]["pluginConfig"][0]["args"] == {
        "scoringStrategy": {"type": "MostAllocated"},
        "cacheResyncPeriodSeconds": 5,
    }
