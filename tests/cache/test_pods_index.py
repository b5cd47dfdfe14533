"""The host-port index agrees with a plain pairwise check of every pod on every node, whatever is added and
removed; a what-if that removes a pod (a reclaim's victim) frees what it held."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.objects import host_ports
from scheduler.api.objects import node as api_node
from scheduler.api.objects import pod as api_pod
from scheduler.api.objects.host_ports import HostPort
from scheduler.cache.pods_index import PortIndex
from scheduler.cache.state import Cache
from scheduler.core.cycle import NoBinding, Scheduler
from scheduler.core.extension_points import Framework
from scheduler.framework import profile
from tests.api import objects

_PORT = st.builds(
    HostPort,
    st.sampled_from(["TCP", "UDP"]),
    st.sampled_from([80, 443, 8080]),
    st.sampled_from([host_ports.ANY_IP, "10.0.0.1", "10.0.0.2"]),
)
_POD = st.tuples(st.integers(0, 9), st.lists(_PORT, min_size=1, max_size=3, unique=True).map(tuple))


@settings(max_examples=200, deadline=None)
@given(st.lists(_POD, max_size=12), st.data())
def test_the_index_matches_a_pairwise_check(pods: list[tuple[int, tuple[HostPort, ...]]], data: st.DataObject) -> None:
    index = PortIndex()
    for slot, ports in pods:
        index.add(slot, ports)
    removed = data.draw(st.sets(st.integers(0, max(len(pods) - 1, 0))) if pods else st.just(set()))
    for i in removed:
        index.add(pods[i][0], pods[i][1], -1)
    kept = [p for i, p in enumerate(pods) if i not in removed]
    wanted = data.draw(st.lists(_PORT, min_size=1, max_size=2, unique=True).map(tuple))
    mask = index.conflicts(wanted, 12)
    for slot in range(12):
        expected = any(host_ports.conflicting(wanted, ports) for s, ports in kept if s == slot)
        assert mask[slot] == expected, (slot, wanted, kept)
    if not kept:
        assert len(index) == 0


def test_a_what_if_that_removes_a_pod_frees_its_ports_and_lifts_its_anti_affinity() -> None:
    # A reclaim's what-if unplaces its victims: the filters must see them gone, and back when put back.
    cache = Cache()
    cache.upsert_node(api_node.parse_node(objects.node("a")))
    victim = objects.pod("victim", node_name="a", phase="Running", labels={"app": "batch"})
    victim["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    victim["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    cache.upsert_pod(api_pod.parse_pod(victim))
    scheduler = Scheduler(cache, Framework.build(profile.parse({"plugins": ["fit", "ports", "interpod"]})), NoBinding())
    web = objects.pod("web", labels={"app": "web"})
    web["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    incoming = api_pod.parse_pod(web)

    snapshot = cache.snapshot()
    assert scheduler.place(incoming, snapshot).decision is None
    entry = cache.pod("default/victim")
    assert entry is not None
    token = snapshot.checkpoint()
    snapshot.unplace(entry.placement)
    assert snapshot.host_port_conflicts(incoming.host_ports).sum() == 0
    decision = scheduler.place(incoming, snapshot).decision
    assert decision is not None and decision.node == "a"
    snapshot.place(entry.placement)  # put back: blocked again
    assert scheduler.place(incoming, snapshot).decision is None
    snapshot.rollback(token)
    assert not snapshot.what_if_pods
