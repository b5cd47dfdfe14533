"""The host-port index agrees with a plain pairwise check of every pod on every node, whatever is added and
removed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api import ports as api_ports
from scheduler.api.ports import HostPort
from scheduler.cache.pods_index import PortIndex

_PORT = st.builds(
    HostPort,
    st.sampled_from(["TCP", "UDP"]),
    st.sampled_from([80, 443, 8080]),
    st.sampled_from([api_ports.ANY_IP, "10.0.0.1", "10.0.0.2"]),
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
        expected = any(api_ports.conflicting(wanted, ports) for s, ports in kept if s == slot)
        assert mask[slot] == expected, (slot, wanted, kept)
    if not kept:
        assert len(index) == 0
