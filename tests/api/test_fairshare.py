"""Fair sharing: decay, usage history, dominant shares, hierarchical fair shares and the order of queues."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler.api.crds.queue import QueueSpec, QueueTree
from scheduler.queue import fairshare

GPU = "nvidia.com/gpu"
CPU = "cpu"
DAY = 86400.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tree_of(*specs: QueueSpec) -> QueueTree:
    tree, problems = QueueTree.build(specs)
    assert problems == []
    return tree


# --- decay and history ------------------------------------------------------------------------------------------


def test_decay_halves_after_one_half_life() -> None:
    usage = {GPU: 8.0, CPU: 1000.0}
    assert fairshare.decay(usage, 3600, 3600) == {GPU: 4.0, CPU: 500.0}
    assert fairshare.decay(usage, 7200, 3600) == {GPU: 2.0, CPU: 250.0}
    assert fairshare.decay(usage, 0, 3600) == usage


def test_a_half_life_of_zero_means_no_history() -> None:
    assert fairshare.decay({GPU: 8.0}, 0, 0) == {GPU: 0.0}
    assert fairshare.decay({GPU: 8.0}, 10, 0) == {GPU: 0.0}


def test_decay_works_on_numpy_vectors() -> None:
    np.testing.assert_allclose(fairshare.decay(np.array([8.0, 2.0]), 60, 60), [4.0, 1.0])


@pytest.mark.parametrize(("elapsed", "half_life"), [(-1, 60), (1, -60), (1, math.inf), (math.nan, 60)])
def test_decay_refuses_negative_times(elapsed: float, half_life: float) -> None:
    with pytest.raises(ValueError):
        fairshare.decay({GPU: 1.0}, elapsed, half_life)


@settings(max_examples=200, deadline=None)
@given(
    amount=st.floats(0, 1e12),
    first=st.floats(0, 1e6),
    second=st.floats(0, 1e6),
    half_life=st.floats(1, 1e6),
)
def test_decay_in_two_steps_is_decay_in_one(amount: float, first: float, second: float, half_life: float) -> None:
    twice = fairshare.decay(fairshare.decay({GPU: amount}, first, half_life), second, half_life)[GPU]
    once = fairshare.decay({GPU: amount}, first + second, half_life)[GPU]
    assert twice == pytest.approx(once, rel=1e-9, abs=1e-300)


def test_history_counts_resource_seconds_and_halves_each_half_life() -> None:
    clock = FakeClock()
    history = fairshare.UsageHistory(clock=clock, half_life_s=3600)
    clock.now = 10.0
    history.record("team", {GPU: 4}, dt_s=10)
    # Ten seconds are short against an hour: close to 40 GPU-seconds.
    assert history.usage("team")[GPU] == pytest.approx(40, rel=1e-2)
    before = history.usage("team")[GPU]
    clock.now += 3600
    assert history.usage("team")[GPU] == pytest.approx(before / 2)
    assert history.usage("nobody") == {}


def test_holding_an_allocation_for_a_long_time_averages_to_that_allocation() -> None:
    clock = FakeClock()
    history = fairshare.UsageHistory(clock=clock, half_life_s=600)
    for _ in range(200):
        clock.now += 60
        history.record("team", {GPU: 8, CPU: 16000}, dt_s=60)
    assert history.average("team") == pytest.approx({GPU: 8, CPU: 16000})
    # One half-life after it let go, half of it.
    clock.now += 600
    assert history.average("team") == pytest.approx({GPU: 4, CPU: 8000})


def test_holding_for_exactly_one_half_life_averages_to_half() -> None:
    clock = FakeClock()
    history = fairshare.UsageHistory(clock=clock, half_life_s=DAY)
    clock.now = DAY
    history.record("team", {GPU: 1}, dt_s=DAY)
    assert history.average("team") == pytest.approx({GPU: 0.5})
    assert history.usage("team") == pytest.approx({GPU: DAY / (2 * math.log(2))})


@settings(max_examples=100, deadline=None)
@given(pieces=st.integers(1, 50), total=st.floats(1, 1e5), half_life=st.floats(10, 1e6))
def test_history_does_not_depend_on_how_often_samples_come(pieces: int, total: float, half_life: float) -> None:
    coarse_clock, fine_clock = FakeClock(), FakeClock()
    coarse = fairshare.UsageHistory(clock=coarse_clock, half_life_s=half_life)
    fine = fairshare.UsageHistory(clock=fine_clock, half_life_s=half_life)
    coarse_clock.now = total
    coarse.record("q", {GPU: 3}, dt_s=total)
    for _ in range(pieces):
        fine_clock.now += total / pieces
        fine.record("q", {GPU: 3}, dt_s=total / pieces)
    assert fine.usage("q")[GPU] == pytest.approx(coarse.usage("q")[GPU], rel=1e-9)


def test_a_queue_with_half_life_zero_has_no_history() -> None:
    clock = FakeClock()
    tree = tree_of(QueueSpec("now-only", usage_half_life_s=0), QueueSpec("remembers", usage_half_life_s=100))
    history = fairshare.UsageHistory(clock=clock)
    history.configure(tree)
    assert history.half_life("now-only") == 0 and history.half_life("remembers") == 100
    assert history.half_life("default") == 86400
    clock.now = 50
    history.record("now-only", {GPU: 8}, dt_s=50)
    history.record("remembers", {GPU: 8}, dt_s=50)
    assert history.average("now-only") == {GPU: 0.0}
    assert history.average("remembers")[GPU] > 0


def test_a_clock_that_steps_back_is_no_time_passing() -> None:
    clock = FakeClock()
    history = fairshare.UsageHistory(clock=clock, half_life_s=100)
    clock.now = 100
    history.record("q", {GPU: 1}, dt_s=100)
    before = history.usage("q")
    clock.now = 50
    assert history.usage("q") == before


# --- dominant share ---------------------------------------------------------------------------------------------


def test_dominant_share_is_the_largest_fraction_divided_by_weight() -> None:
    capacity = {GPU: 8, CPU: 64000, "memory": 0}
    allocated = {GPU: 2, CPU: 32000, "memory": 5}
    assert fairshare.dominant_share(allocated=allocated, capacity=capacity) == 0.5
    assert fairshare.dominant_share(allocated=allocated, capacity=capacity, weight=2) == 0.25
    # Decayed usage adds to what is held now: (2 + 4) / 8 of the GPUs dominates 32000 / 64000 of the CPU.
    history = {GPU: 4.0}
    assert fairshare.dominant_share(allocated=allocated, decayed_usage=history, capacity=capacity) == 0.75
    assert fairshare.dominant_share(allocated={}, capacity=capacity) == 0.0


# --- fair shares ------------------------------------------------------------------------------------------------


def test_hierarchical_fair_shares_by_hand() -> None:
    tree = tree_of(
        QueueSpec("org", guaranteed={GPU: 8}, limit={GPU: 12}),
        QueueSpec("a", parent="org", guaranteed={GPU: 4}),
        QueueSpec("c", parent="org", guaranteed={GPU: 2}),
        QueueSpec("batch", weight=2),
    )
    shares = fairshare.fair_shares(
        tree,
        capacity={GPU: 16, CPU: 64000},
        demand={"a": {GPU: 10, CPU: 1000}, "c": {GPU: 10}, "batch": {GPU: 100}, "default": {GPU: 1}},
    )
    # Top level: org is guaranteed 8 of 16. The other 8 are water-filled by weight (batch 2, default 1, org 1):
    # default wants only 1; the 7 left go 2:1:1 with org capped at 12 - 8 = 4: batch 14/3, org 7/3.
    assert shares["default"].resources[GPU] == pytest.approx(1)
    assert shares["batch"].resources[GPU] == pytest.approx(14 / 3)
    assert shares["org"].resources[GPU] == pytest.approx(8 + 7 / 3)
    # Inside org: guarantees 4 and 2 first, then the remaining 13/3 split equally.
    assert shares["a"].resources[GPU] == pytest.approx(4 + 13 / 6)
    assert shares["c"].resources[GPU] == pytest.approx(2 + 13 / 6)
    # CPU: only a asks, and gets it all.
    assert shares["a"].resources[CPU] == pytest.approx(1000)
    assert shares["org"].resources[CPU] == pytest.approx(1000)
    assert shares["batch"].dominant == pytest.approx((14 / 3) / 16)


def test_a_queue_that_does_not_lend_keeps_its_idle_guarantee() -> None:
    tree = tree_of(
        QueueSpec("keeper", guaranteed={GPU: 4}, lending_allowed=False),
        QueueSpec("lender", guaranteed={GPU: 4}),
        QueueSpec("lender-with-limit", guaranteed={GPU: 4}, lending_limit={GPU: 1}),
        QueueSpec("borrower"),
    )
    shares = fairshare.fair_shares(tree, capacity={GPU: 16}, demand={"borrower": {GPU: 100}})
    assert shares["keeper"].resources[GPU] == 4
    assert shares["lender"].resources[GPU] == 0
    assert shares["lender-with-limit"].resources[GPU] == 3
    assert shares["borrower"].resources[GPU] == pytest.approx(16 - 4 - 3)


def test_a_queue_that_does_not_borrow_stays_at_its_guarantee() -> None:
    tree = tree_of(QueueSpec("closed", guaranteed={GPU: 4}, borrowing_allowed=False), QueueSpec("open"))
    shares = fairshare.fair_shares(tree, capacity={GPU: 16}, demand={"closed": {GPU: 100}, "open": {GPU: 5}})
    assert shares["closed"].resources[GPU] == 4
    assert shares["open"].resources[GPU] == 5


def test_borrowing_and_plain_limits_cap_the_share() -> None:
    tree = tree_of(
        QueueSpec("capped", guaranteed={GPU: 2}, borrowing_limit={GPU: 3}),
        QueueSpec("limited", limit={GPU: 4}),
        QueueSpec("open"),
    )
    demand = {name: {GPU: 100.0} for name in ("capped", "limited", "open")}
    shares = fairshare.fair_shares(tree, capacity={GPU: 32}, demand=demand)
    assert shares["capped"].resources[GPU] == 5
    assert shares["limited"].resources[GPU] == 4
    assert shares["open"].resources[GPU] == pytest.approx(23)


def test_guarantees_beyond_the_cluster_are_cut_in_proportion() -> None:
    tree = tree_of(QueueSpec("a", guaranteed={GPU: 12}), QueueSpec("b", guaranteed={GPU: 4}))
    shares = fairshare.fair_shares(tree, capacity={GPU: 8}, demand={"a": {GPU: 20}, "b": {GPU: 20}})
    assert shares["a"].resources[GPU] == pytest.approx(6)
    assert shares["b"].resources[GPU] == pytest.approx(2)


def test_demand_of_a_queue_that_is_not_a_leaf_is_left_out() -> None:
    tree = tree_of(QueueSpec("org"), QueueSpec("team", parent="org"))
    shares = fairshare.fair_shares(tree, capacity={GPU: 8}, demand={"org": {GPU: 8}, "ghost": {GPU: 8}})
    assert shares["org"].resources[GPU] == 0


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[QueueTree, dict[str, float], dict[str, dict[str, float]]]:
    """A tree of up to 7 queues (parents drawn among the earlier ones), a cluster, and each leaf's demand."""
    specs: list[QueueSpec] = []
    for i in range(draw(st.integers(1, 7))):
        parent = draw(st.sampled_from(["", *(spec.name for spec in specs)]))
        guaranteed = draw(st.dictionaries(st.sampled_from([GPU, CPU]), st.integers(0, 12), max_size=2))
        limit = {r: g + draw(st.integers(0, 24)) for r, g in guaranteed.items() if draw(st.booleans())}
        if draw(st.booleans()):
            limit[GPU] = max(limit.get(GPU, 0), guaranteed.get(GPU, 0)) + draw(st.integers(0, 16))
        specs.append(
            QueueSpec(
                f"q{i}",
                parent=parent,
                weight=draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
                guaranteed=guaranteed,
                limit=limit,
                borrowing_allowed=draw(st.booleans()),
                borrowing_limit=draw(st.dictionaries(st.sampled_from([GPU, CPU]), st.integers(0, 8), max_size=1)),
                lending_allowed=draw(st.booleans()),
                lending_limit=draw(st.dictionaries(st.sampled_from([GPU, CPU]), st.integers(0, 8), max_size=1)),
            )
        )
    tree, _ = QueueTree.build(specs)
    capacity = {GPU: float(draw(st.integers(0, 64))), CPU: float(draw(st.integers(0, 64)))}
    demand = {
        leaf: {GPU: float(draw(st.integers(0, 40))), CPU: float(draw(st.integers(0, 40)))} for leaf in tree.leaves()
    }
    return tree, capacity, demand


EPS = 1e-9


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_fair_shares_never_exceed_the_cluster_a_parent_or_a_ceiling(
    scenario: tuple[QueueTree, dict[str, float], dict[str, dict[str, float]]],
) -> None:
    tree, capacity, demand = scenario
    shares = fairshare.fair_shares(tree, capacity=capacity, demand=demand)
    assert set(shares) == set(tree)
    for resource, total in capacity.items():
        top = sum(shares[name].resources[resource] for name in tree.roots())
        assert top <= total + EPS
        for name in tree:
            share = shares[name].resources[resource]
            assert share >= 0
            assert share <= tree.spec(name).ceiling().get(resource, math.inf) + EPS
            below = sum(shares[child].resources[resource] for child in tree.children(name))
            assert below <= share + EPS
            if tree.is_leaf(name):
                # Never more than asked for, except an idle guarantee kept because the queue does not lend.
                kept = min(tree.guaranteed(name).get(resource, 0), tree.spec(name).unlendable().get(resource, 0))
                assert share <= max(demand[name][resource], kept) + EPS
        # Work-conserving: capacity stays unused only when nobody at the top wants more.
        if top < total - 1e-6:
            for name in tree.roots():
                assert _wanted(tree, name, resource, demand) <= shares[name].resources[resource] + 1e-6


def _wanted(tree: QueueTree, name: str, resource: str, demand: Mapping[str, Mapping[str, float]]) -> float:
    spec = tree.spec(name)
    if tree.is_leaf(name):
        asked = demand[name][resource]
    else:
        asked = sum(_wanted(tree, child, resource, demand) for child in tree.children(name))
    kept = min(tree.guaranteed(name).get(resource, 0), spec.unlendable().get(resource, 0))
    return min(spec.ceiling().get(resource, math.inf), max(asked, kept))


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_guarantees_are_honoured_when_demanded_and_the_cluster_holds_them(
    scenario: tuple[QueueTree, dict[str, float], dict[str, dict[str, float]]],
) -> None:
    tree, capacity, demand = scenario
    shares = fairshare.fair_shares(tree, capacity=capacity, demand=demand)
    for resource, total in capacity.items():
        promised = sum(
            min(tree.guaranteed(name).get(resource, 0), _wanted(tree, name, resource, demand)) for name in tree.roots()
        )
        if promised > total:
            continue
        for leaf in tree.leaves():
            owed = min(tree.guaranteed(leaf).get(resource, 0), _wanted(tree, leaf, resource, demand))
            assert shares[leaf].resources[resource] >= owed - EPS


@settings(max_examples=200, deadline=None)
@given(
    queues=st.integers(2, 6),
    each=st.integers(0, 50),
    capacity=st.integers(0, 100),
    guarantee=st.integers(0, 5),
)
def test_equal_weights_and_equal_demand_give_equal_shares(
    queues: int, each: int, capacity: int, guarantee: int
) -> None:
    guaranteed = {GPU: min(guarantee, capacity // queues)}
    tree = tree_of(*(QueueSpec(f"q{i}", weight=1.5, guaranteed=guaranteed) for i in range(queues)))
    demand = {f"q{i}": {GPU: float(each)} for i in range(queues)}
    shares = fairshare.fair_shares(tree, capacity={GPU: capacity}, demand=demand)
    values = [shares[f"q{i}"].resources[GPU] for i in range(queues)]
    assert values == pytest.approx([values[0]] * queues)
    assert values[0] == pytest.approx(min(each, capacity / queues))


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 300),
    weight=st.sampled_from([0.25, 1.0, 3.0]),
    extra_heavy=st.integers(0, 100),
    extra_light=st.integers(0, 100),
    nested=st.booleans(),
)
def test_weights_two_to_one_give_shares_two_to_one_when_both_are_saturated(
    capacity: int, weight: float, extra_heavy: int, extra_light: int, nested: bool
) -> None:
    parent = "org" if nested else ""
    specs = [QueueSpec("heavy", parent=parent, weight=2 * weight), QueueSpec("light", parent=parent, weight=weight)]
    if nested:
        specs.append(QueueSpec("org"))
    tree = tree_of(*specs)
    # Saturated: each asks for at least the whole cluster.
    demand = {"heavy": {GPU: float(capacity + extra_heavy)}, "light": {GPU: float(capacity + extra_light)}}
    shares = fairshare.fair_shares(tree, capacity={GPU: capacity}, demand=demand)
    heavy, light = shares["heavy"].resources[GPU], shares["light"].resources[GPU]
    assert heavy == pytest.approx(2 * light)
    assert heavy + light == pytest.approx(capacity)


# --- Jain's index -----------------------------------------------------------------------------------------------


def test_jain_index_examples() -> None:
    assert fairshare.jain_index([3.0, 3.0, 3.0]) == 1.0
    assert fairshare.jain_index([1.0, 0.0, 0.0, 0.0]) == 0.25
    assert fairshare.jain_index([1.0, 3.0]) == pytest.approx(16 / 20)
    assert fairshare.jain_index([]) == 1.0
    assert fairshare.jain_index([0.0, 0.0]) == 1.0
    with pytest.raises(ValueError):
        fairshare.jain_index([1.0, -1.0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e9), min_size=1, max_size=50))
@example([9.613133017894459e-159] * 3)  # squares that underflow: 1.0000000059 before the values were scaled
@example([1e300, 1e300])  # squares that overflow
def test_jain_index_lies_between_one_over_n_and_one(values: list[float]) -> None:
    index = fairshare.jain_index(values)
    assert 1 / len(values) - 1e-12 <= index <= 1 + 1e-12


@settings(max_examples=100, deadline=None)
@given(value=st.floats(1e-6, 1e9), n=st.integers(1, 50))
def test_jain_index_of_equal_values_is_one(value: float, n: int) -> None:
    assert fairshare.jain_index([value] * n) == pytest.approx(1.0)


# --- order of leaves --------------------------------------------------------------------------------------------


def order_leaves(
    tree: QueueTree,
    *,
    heads: dict[str, dict[str, float]],
    allocated: dict[str, dict[str, float]],
    capacity: dict[str, float],
    decayed_usage: dict[str, dict[str, float] | None] | None = None,
) -> list[str]:
    """The leaves with pending work in the order the loop gives them the next job: by ``leaf_keys``, which is
    what ``Tenancy.rank`` sorts the scheduling queue by (names that are not leaves are left out)."""
    keys = fairshare.leaf_keys(tree, allocated=allocated, capacity=capacity, decayed_usage=decayed_usage)
    return sorted((leaf for leaf in heads if leaf in keys), key=keys.__getitem__)


def drf(tree: QueueTree, capacity: dict[str, float], tasks: dict[str, dict[str, float]]) -> dict[str, int]:
    """Progressive filling as a scheduler would do it: each step, the first leaf in order whose next task fits
    gets one; stop when none fits. Returns the tasks each leaf got."""
    allocated: dict[str, dict[str, float]] = {leaf: {} for leaf in tasks}
    count = dict.fromkeys(tasks, 0)
    while True:
        order = order_leaves(tree, heads=tasks, allocated=allocated, capacity=capacity)
        used = {r: sum(a.get(r, 0.0) for a in allocated.values()) for r in capacity}
        for leaf in order:
            if all(used[r] + tasks[leaf].get(r, 0.0) <= capacity[r] for r in capacity):
                for r, amount in tasks[leaf].items():
                    allocated[leaf][r] = allocated[leaf].get(r, 0.0) + amount
                count[leaf] += 1
                break
        else:
            return count


def test_drf_gives_the_example_of_the_drf_paper() -> None:
    # Ghodsi et al. 2011: 9 CPUs and 18 GB; A's tasks need <1 CPU, 4 GB>, B's <3 CPU, 1 GB>.
    # DRF gives A three tasks and B two, both with dominant share 2/3.
    tree = tree_of(QueueSpec("a"), QueueSpec("b"))
    got = drf(tree, {CPU: 9, "memory": 18}, {"a": {CPU: 1, "memory": 4}, "b": {CPU: 3, "memory": 1}})
    assert got == {"a": 3, "b": 2}


def test_weighted_drf_by_hand() -> None:
    # 12 GPUs, one per task; weights 2:1. Shares over weight stay equal: heavy gets 8, light 4.
    tree = tree_of(QueueSpec("heavy", weight=2), QueueSpec("light", weight=1))
    got = drf(tree, {GPU: 12}, {"heavy": {GPU: 1}, "light": {GPU: 1}})
    assert got == {"heavy": 8, "light": 4}


def test_lowest_weighted_dominant_share_goes_first_ties_by_name() -> None:
    tree = tree_of(QueueSpec("a"), QueueSpec("b", weight=2), QueueSpec("c"))
    capacity = {GPU: 8, CPU: 64000}
    heads = {name: {GPU: 1} for name in ("a", "b", "c")}
    # a: 2/8 = 0.25. b: max(2/8, 32000/64000) / 2 = 0.25. c: 1/8.
    allocated = {"a": {GPU: 2}, "b": {GPU: 2, CPU: 32000}, "c": {GPU: 1}}
    assert order_leaves(tree, heads=heads, allocated=allocated, capacity=capacity) == ["c", "a", "b"]


def test_usage_history_ranks_a_queue_that_used_a_lot_behind() -> None:
    tree = tree_of(QueueSpec("busy"), QueueSpec("quiet"))
    heads = {"busy": {GPU: 1}, "quiet": {GPU: 1}}
    allocated = {"busy": {GPU: 2}, "quiet": {GPU: 3}}
    history = {"busy": {GPU: 4.0}}  # busy held 4 GPUs on average lately: (4 + 2) / 8 against 3 / 8
    assert order_leaves(tree, heads=heads, allocated=allocated, capacity={GPU: 8}) == ["busy", "quiet"]
    order = order_leaves(tree, heads=heads, allocated=allocated, capacity={GPU: 8}, decayed_usage=history)
    assert order == ["quiet", "busy"]


def test_work_within_a_guarantee_goes_before_borrowing() -> None:
    tree = tree_of(QueueSpec("owner", guaranteed={GPU: 6}), QueueSpec("borrower"))
    capacity = {GPU: 8}
    # The owner holds more (4 against 1), but its next job stays within its guarantee of 6.
    allocated = {"owner": {GPU: 4}, "borrower": {GPU: 1}}
    heads = {"owner": {GPU: 2}, "borrower": {GPU: 1}}
    assert order_leaves(tree, heads=heads, allocated=allocated, capacity=capacity) == ["owner", "borrower"]
    # A job that would take it past 6 borrows, and competes on share: the owner still uses 2 GPUs less than its
    # guarantee (share -2/8), the borrower 1 more than its guarantee of 0 (1/8).
    heads["owner"] = {GPU: 3}
    assert order_leaves(tree, heads=heads, allocated=allocated, capacity=capacity) == ["owner", "borrower"]
    # Once the owner holds more than its guarantee, what counts is what each holds beyond it: 1/8 against 0.5/8.
    allocated = {"owner": {GPU: 7}, "borrower": {GPU: 0.5}}
    assert order_leaves(tree, heads=heads, allocated=allocated, capacity=capacity) == ["borrower", "owner"]


def test_borrowed_share_ranks_toward_the_water_filled_fair_share() -> None:
    # 16 GPUs; a guaranteed 8 with weight 1, b nothing with weight 1. Fair: a 8 + 4, b 4. At a=11, b=5 the next
    # GPU goes to a (3/16 beyond its guarantee, against 5/16), although a holds more.
    tree = tree_of(QueueSpec("a", guaranteed={GPU: 8}), QueueSpec("b"))
    heads = {"a": {GPU: 1}, "b": {GPU: 1}}
    allocated = {"a": {GPU: 11}, "b": {GPU: 5}}
    assert order_leaves(tree, heads=heads, allocated=allocated, capacity={GPU: 16}) == ["a", "b"]
    allocated = {"a": {GPU: 12}, "b": {GPU: 3}}
    assert order_leaves(tree, heads=heads, allocated=allocated, capacity={GPU: 16}) == ["b", "a"]


def test_ordering_is_hierarchical() -> None:
    # Two departments of weight 1; research has three busy teams, ops one. Flat DRF over leaves would favour the
    # research teams; hierarchically ops goes first because its department holds less.
    tree = tree_of(
        QueueSpec("research"),
        QueueSpec("r1", parent="research"),
        QueueSpec("r2", parent="research"),
        QueueSpec("r3", parent="research"),
        QueueSpec("ops"),
        QueueSpec("o1", parent="ops"),
    )
    allocated = {"r1": {GPU: 1}, "r2": {GPU: 1}, "r3": {GPU: 2}, "o1": {GPU: 3}}
    heads = {leaf: {GPU: 1} for leaf in ("r1", "r2", "r3", "o1")}
    order = order_leaves(tree, heads=heads, allocated=allocated, capacity={GPU: 16})
    assert order == ["o1", "r1", "r2", "r3"]


def test_queue_priority_breaks_ties_of_share() -> None:
    tree = tree_of(QueueSpec("a"), QueueSpec("b", priority=5))
    heads = {"a": {GPU: 1}, "b": {GPU: 1}}
    assert order_leaves(tree, heads=heads, allocated={}, capacity={GPU: 8}) == ["b", "a"]


def test_only_leaves_with_pending_work_are_ordered() -> None:
    tree = tree_of(QueueSpec("org"), QueueSpec("team", parent="org"))
    heads = {"org": {GPU: 1}, "team": {GPU: 1}, "ghost": {GPU: 1}}
    assert order_leaves(tree, heads=heads, allocated={}, capacity={GPU: 8}) == ["team"]


def test_guarantee_and_ceiling_checks_hold_at_every_level() -> None:
    tree = tree_of(
        QueueSpec("org", guaranteed={GPU: 8}, limit={GPU: 10}),
        QueueSpec("a", parent="org", guaranteed={GPU: 2}),
        QueueSpec("b", parent="org"),
    )
    allocated = {"a": {GPU: 2}, "b": {GPU: 5}}
    # a is at its own guarantee: one more GPU borrows (a decides, it names GPUs).
    assert not fairshare.within_guarantee(tree, "a", {GPU: 1}, allocated=allocated)
    # b names no guarantee: org decides, which holds 7 of its 8.
    assert fairshare.within_guarantee(tree, "b", {GPU: 1}, allocated=allocated)
    assert not fairshare.within_guarantee(tree, "b", {GPU: 2}, allocated=allocated)
    # CPU is guaranteed nowhere: always borrowed.
    assert not fairshare.within_guarantee(tree, "b", {CPU: 1}, allocated=allocated)
    # org's limit of 10 bounds both leaves (the loop's check: tests/core/test_tenancy.py).
