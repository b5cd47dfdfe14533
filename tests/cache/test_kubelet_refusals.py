"""The nodes an owner's pods keep off for a while after a kubelet refused one of them (TopologyAffinityError)."""

from __future__ import annotations

from scheduler.cache.kubelet_refusals import KubeletRefusals
from tests.core.harness import Clock


def refusals(now: float = 1000.0) -> tuple[KubeletRefusals, Clock]:
    clock = Clock()
    clock.now = now
    return KubeletRefusals(ttl_s=300.0, clock=clock), clock


def test_an_owners_pods_keep_off_the_node_until_the_time_is_up_and_other_owners_do_not() -> None:
    memory, clock = refusals()
    assert memory.refused(owner="rs-a", node="gpu-0")
    assert memory.nodes("rs-a") == ["gpu-0"]
    assert memory.nodes("rs-b") == [] and memory.nodes("") == []
    clock.now += 299.0
    assert memory.nodes("rs-a") == ["gpu-0"]
    clock.now += 1.0
    assert memory.nodes("rs-a") == []


def test_the_refusal_counts_from_when_the_kubelet_refused_not_from_when_it_is_seen_again() -> None:
    memory, clock = refusals()
    assert memory.refused(owner="rs-a", node="gpu-0", at=900.0)
    # Seen again (a relist, a restart): the same refusal is no news and keeps its end.
    assert not memory.refused(owner="rs-a", node="gpu-0", at=900.0)
    clock.now = 1199.0
    assert memory.nodes("rs-a") == ["gpu-0"]
    clock.now = 1200.0
    assert memory.nodes("rs-a") == []
    # A pod refused longer ago than the memory lasts (listed after a restart) keeps nothing off.
    assert not memory.refused(owner="rs-a", node="gpu-0", at=800.0)
    assert memory.nodes("rs-a") == []


def test_a_later_refusal_on_another_node_adds_to_the_first_and_one_on_the_same_node_lasts_longer() -> None:
    memory, clock = refusals()
    memory.refused(owner="rs-a", node="gpu-0")
    clock.now += 100.0
    assert memory.refused(owner="rs-a", node="gpu-1")
    assert sorted(memory.nodes("rs-a")) == ["gpu-0", "gpu-1"]
    assert memory.refused(owner="rs-a", node="gpu-0")
    clock.now += 250.0
    assert sorted(memory.nodes("rs-a")) == ["gpu-0", "gpu-1"]
