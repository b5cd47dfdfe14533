"""Queues: parsing names the bad field, and a tree with bad queues leaves them out and keeps working."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import queue
from scheduler.api.crds.queue import QueueSpec, QueueTree

GPU = "nvidia.com/gpu"
CRD = Path(__file__).resolve().parents[2] / "crds" / "queues.yaml"


def raw(name: str = "research", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.gpusched.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def test_a_full_queue_is_parsed_in_scheduler_units() -> None:
    parsed = queue.parse_queue(
        raw(
            "vision",
            parent="research",
            weight=2.5,
            guaranteed={GPU: 8, "cpu": "64", "memory": "512Gi"},
            limit={GPU: "24", "cpu": "96000m"},
            borrowing={"allowed": True, "limit": {GPU: 8}},
            lending={"allowed": False},
            priority=10,
            preemption={"withinQueue": "Never", "reclaim": "LowerPriority"},
            usageHalfLifeSeconds=3600,
        )
    )
    assert parsed == QueueSpec(
        name="vision",
        parent="research",
        weight=2.5,
        guaranteed={GPU: 8, "cpu": 64000, "memory": 512 * 2**30},
        limit={GPU: 24, "cpu": 96000},
        borrowing_allowed=True,
        borrowing_limit={GPU: 8},
        lending_allowed=False,
        lending_limit={},
        priority=10,
        within_queue="Never",
        reclaim="LowerPriority",
        usage_half_life_s=3600.0,
    )


def test_an_empty_spec_gets_the_documented_defaults() -> None:
    parsed = queue.parse_queue({"metadata": {"name": "batch"}})
    assert parsed == QueueSpec(name="batch")
    assert (parsed.weight, parsed.priority, parsed.within_queue, parsed.reclaim) == (1.0, 0, "LowerPriority", "Any")
    assert parsed.borrowing_allowed and parsed.lending_allowed
    # Not zero: a zero default would silently turn usage history off.
    assert parsed.usage_half_life_s == queue.DEFAULT_HALF_LIFE_S == 86400


def test_a_queue_moves_all_but_training_unless_it_says_otherwise() -> None:
    assert queue.parse_queue({"metadata": {"name": "a"}}).moves == "ExceptTraining"
    for moves in ("Never", "Any"):
        assert (
            queue.parse_queue({"metadata": {"name": "a"}, "spec": {"consolidation": {"moves": moves}}}).moves == moves
        )


def test_minimum_run_times_are_read_in_seconds_and_unset_means_inherited() -> None:
    spec = queue.parse_queue(
        raw(
            preemption={"withinQueueMinRuntimeSeconds": 300, "reclaimMinRuntimeSeconds": 0},
            consolidation={"moveMinRuntimeSeconds": 900},
        )
    )
    assert (spec.preempt_min_runtime_s, spec.reclaim_min_runtime_s, spec.move_min_runtime_s) == (300.0, 0.0, 900.0)
    empty = queue.parse_queue(raw())
    assert (empty.preempt_min_runtime_s, empty.reclaim_min_runtime_s, empty.move_min_runtime_s) == (None, None, None)


def test_zero_half_life_is_accepted_and_means_no_history() -> None:
    assert queue.parse_queue(raw(usageHalfLifeSeconds=0)).usage_half_life_s == 0.0


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (raw(weight=0), "spec.weight"),
        (raw(weight=-1.5), "spec.weight"),
        (raw(weight="2"), "spec.weight"),
        (raw(weight=True), "spec.weight"),
        (raw(weight=float("nan")), "spec.weight"),
        (raw(weight=float("inf")), "spec.weight"),
        (raw(guaranteed={GPU: 8}, limit={GPU: 4}), f"spec.limit.{GPU}"),
        (raw(guaranteed={"cpu": "2"}, limit={"cpu": "1500m"}), "spec.limit.cpu"),
        (raw(guaranteed={"memory": "2Gi"}, limit={"memory": "2000Mi"}), "spec.limit.memory"),
        (raw(guaranteed={GPU: "lots"}), f"spec.guaranteed.{GPU}"),
        (raw(guaranteed={GPU: "1.5"}), f"spec.guaranteed.{GPU}"),
        (raw(limit={GPU: 2.5}), f"spec.limit.{GPU}"),
        (raw(limit={GPU: "500m"}), f"spec.limit.{GPU}"),
        (raw(borrowing={"limit": {GPU: "0.5"}}), f"spec.borrowing.limit.{GPU}"),
        (raw(lending={"limit": {GPU: "1500m"}}), f"spec.lending.limit.{GPU}"),
        (raw(guaranteed={GPU: "-1"}), f"spec.guaranteed.{GPU}"),
        (raw(guaranteed=[GPU]), "spec.guaranteed"),
        (raw(limit={"memory": "1 Gi"}), "spec.limit.memory"),
        (raw(borrowing={"allowed": "yes"}), "spec.borrowing.allowed"),
        (raw(borrowing={"limit": {GPU: "x"}}), f"spec.borrowing.limit.{GPU}"),
        (raw(borrowing=True), "spec.borrowing"),
        (raw(lending={"limit": {"memory": "-1Gi"}}), "spec.lending.limit.memory"),
        (raw(preemption={"reclaim": "Always"}), "spec.preemption.reclaim"),
        (raw(preemption={"withinQueue": "Any"}), "spec.preemption.withinQueue"),
        (raw(preemption={"withinQueue": None}), "spec.preemption.withinQueue"),
        (raw(preemption="Never"), "spec.preemption"),
        (raw(consolidation={"moves": "Training"}), "spec.consolidation.moves"),
        (raw(consolidation="Never"), "spec.consolidation"),
        (raw(usageHalfLifeSeconds=-1), "spec.usageHalfLifeSeconds"),
        (raw(preemption={"reclaimMinRuntimeSeconds": -1}), "spec.preemption.reclaimMinRuntimeSeconds"),
        (raw(preemption={"withinQueueMinRuntimeSeconds": "10m"}), "spec.preemption.withinQueueMinRuntimeSeconds"),
        (raw(consolidation={"moveMinRuntimeSeconds": True}), "spec.consolidation.moveMinRuntimeSeconds"),
        (raw(usageHalfLifeSeconds="1d"), "spec.usageHalfLifeSeconds"),
        (raw(usageHalfLifeSeconds=float("inf")), "spec.usageHalfLifeSeconds"),
        (raw(priority=1.5), "spec.priority"),
        (raw(parent=7), "spec.parent"),
        (raw("loop", parent="loop"), "spec.parent"),
        ({"metadata": {}, "spec": {}}, "metadata.name"),
    ],
)
def test_a_bad_queue_is_refused_naming_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as err:
        queue.parse_queue(obj)
    assert err.value.field == field
    assert field in str(err.value)
    if obj["metadata"].get("name"):
        assert err.value.obj == f"queue {obj['metadata']['name']}"


amounts = st.integers(min_value=0, max_value=10**6)
resource_names = st.sampled_from([GPU, "cpu", "memory", "example.com/fpga"])


@settings(max_examples=200, deadline=None)
@given(
    guaranteed=st.dictionaries(resource_names, amounts, max_size=4),
    headroom=st.dictionaries(resource_names, amounts, max_size=4),
    weight=st.floats(min_value=1e-6, max_value=1e6),
)
def test_limits_at_or_above_guarantees_parse_back_exactly(
    guaranteed: dict[str, int], headroom: dict[str, int], weight: float
) -> None:
    # Quantities written as plain integers: CPU is then in cores, so scheduler units are 1000 times that.
    limit = {name: guaranteed.get(name, 0) + extra for name, extra in headroom.items()}
    parsed = queue.parse_queue(raw(weight=weight, guaranteed=guaranteed, limit=limit))
    scale = {"cpu": 1000}
    assert parsed.guaranteed == {name: amount * scale.get(name, 1) for name, amount in guaranteed.items()}
    assert parsed.limit == {name: amount * scale.get(name, 1) for name, amount in limit.items()}
    assert parsed.weight == weight


@settings(max_examples=200, deadline=None)
@given(
    guaranteed=st.dictionaries(resource_names, st.integers(min_value=1, max_value=10**6), min_size=1, max_size=4),
    data=st.data(),
)
def test_a_limit_below_a_guarantee_is_refused_naming_that_resource(guaranteed: dict[str, int], data: Any) -> None:
    short = data.draw(st.sampled_from(sorted(guaranteed)))
    limit = dict(guaranteed)
    limit[short] = data.draw(st.integers(min_value=0, max_value=guaranteed[short] - 1))
    with pytest.raises(InvalidObject) as err:
        queue.parse_queue(raw(guaranteed=guaranteed, limit=limit))
    assert err.value.field == f"spec.limit.{short}"


def test_the_ceiling_is_the_lowest_of_limit_and_guarantee_plus_borrowing() -> None:
    spec = QueueSpec(
        name="q", guaranteed={GPU: 8, "cpu": 4000}, limit={GPU: 20, "memory": 10}, borrowing_limit={GPU: 4}
    )
    assert spec.ceiling() == {GPU: 12, "memory": 10}
    closed = QueueSpec(name="q", guaranteed={GPU: 8}, limit={GPU: 20}, borrowing_allowed=False)
    # Without borrowing only the resources the guarantee names are bounded by it: CPU stays unbounded.
    assert closed.ceiling() == {GPU: 8}


def test_unlendable_is_what_the_queue_keeps_of_its_guarantee() -> None:
    assert QueueSpec(name="q", guaranteed={GPU: 8}).unlendable() == {}
    assert QueueSpec(name="q", guaranteed={GPU: 8}, lending_allowed=False).unlendable() == {GPU: 8}
    assert QueueSpec(name="q", guaranteed={GPU: 8, "cpu": 10}, lending_limit={GPU: 3}).unlendable() == {GPU: 5}
    assert QueueSpec(name="q", guaranteed={GPU: 2}, lending_limit={GPU: 3}).unlendable() == {GPU: 0}


def test_the_crd_defaults_and_enums_match_the_parser() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["group"] == queue.GROUP
    assert crd["spec"]["names"]["plural"] == queue.PLURAL
    (version,) = crd["spec"]["versions"]
    assert version["name"] == queue.VERSION
    assert version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    defaults = QueueSpec(name="x")
    assert spec["usageHalfLifeSeconds"]["default"] == defaults.usage_half_life_s == queue.DEFAULT_HALF_LIFE_S
    assert spec["weight"]["default"] == defaults.weight
    assert spec["priority"]["default"] == defaults.priority
    assert spec["borrowing"]["properties"]["allowed"]["default"] is defaults.borrowing_allowed
    assert spec["lending"]["properties"]["allowed"]["default"] is defaults.lending_allowed
    preemption = spec["preemption"]["properties"]
    assert tuple(preemption["withinQueue"]["enum"]) == queue.WITHIN_QUEUE
    assert tuple(preemption["reclaim"]["enum"]) == queue.RECLAIM
    assert preemption["withinQueue"]["default"] == defaults.within_queue
    assert preemption["reclaim"]["default"] == defaults.reclaim
    # The minimum run times have no default: not set, a queue takes its parent's.
    minimums = [
        preemption["withinQueueMinRuntimeSeconds"],
        preemption["reclaimMinRuntimeSeconds"],
        spec["consolidation"]["properties"]["moveMinRuntimeSeconds"],
    ]
    assert all(m["type"] == "integer" and m["minimum"] == 0 and "default" not in m for m in minimums)
    # What `kubectl get gq` shows (issue 17's columns, and whether the queue is in use first: issue 32); `-o wide`
    # adds the priority-1 ones.
    columns = [column["name"] for column in version["additionalPrinterColumns"] if not column.get("priority")]
    assert columns == [
        "Accepted",
        "GPU Guarantee",
        "GPU Limit",
        "GPU Allocated",
        "Pending Jobs",
        "Admitted Jobs",
        "Share",
        "Fair Share",
        "Age",
    ]
    wide = [column["name"] for column in version["additionalPrinterColumns"] if column.get("priority")]
    assert {"Parent", "Weight", "Pending Pods", "GPU Borrowed"} <= set(wide)
    # The limit comes from the status, where the scheduler writes "none" for no limit (a blank said nothing).
    limit = next(column for column in version["additionalPrinterColumns"] if column["name"] == "GPU Limit")
    assert limit["jsonPath"] == ".status.gpuLimit"
    assert "gpuLimit" in version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]


# --- the tree -------------------------------------------------------------------------------------------------


def build(*specs: QueueSpec) -> tuple[QueueTree, dict[str, InvalidObject]]:
    tree, problems = QueueTree.build(specs)
    by_queue = {problem.obj.removeprefix("queue "): problem for problem in problems}
    assert len(by_queue) == len(problems)
    return tree, by_queue


def test_a_tree_knows_parents_children_ancestors_and_leaves() -> None:
    tree, problems = build(
        QueueSpec("research", guaranteed={GPU: 16}),
        QueueSpec("vision", parent="research", guaranteed={GPU: 8}),
        QueueSpec("nlp", parent="research", guaranteed={GPU: 4}),
        QueueSpec("nlp-small", parent="nlp"),
        QueueSpec("batch"),
    )
    assert problems == {}
    assert list(tree) == ["batch", "default", "research", "nlp", "nlp-small", "vision"]
    assert tree.roots() == ["batch", "default", "research"]
    assert tree.children("research") == ["nlp", "vision"]
    assert tree.ancestors("nlp-small") == ["nlp", "research"]
    assert tree.ancestors("batch") == []
    assert tree.leaves() == ["batch", "default", "nlp-small", "vision"]
    assert not tree.is_leaf("nlp") and tree.is_leaf("nlp-small")
    assert tree.subtree("research") == ["research", "nlp", "nlp-small", "vision"]
    assert tree.guaranteed("research") == {GPU: 16}
    # nlp-small names no guarantee: nlp keeps its own 4 GPUs, shared by whatever is below it.
    assert tree.guaranteed("nlp") == {GPU: 4}
    with pytest.raises(KeyError):
        tree.children("nope")


def test_a_parent_without_a_guarantee_guarantees_the_sum_of_its_children() -> None:
    tree, problems = build(
        QueueSpec("org"),
        QueueSpec("a", parent="org", guaranteed={GPU: 4, "cpu": 1000}),
        QueueSpec("b", parent="org", guaranteed={GPU: 2}),
    )
    assert problems == {}
    assert tree.guaranteed("org") == {GPU: 6, "cpu": 1000}


def test_the_default_queue_is_implied_when_absent() -> None:
    tree, problems = build(QueueSpec("research"))
    assert problems == {}
    assert "default" in tree
    assert tree.spec("default") == QueueSpec(name="default")
    assert tree.is_leaf("default")


def test_an_explicit_default_queue_is_kept_as_given() -> None:
    tree, _ = build(QueueSpec("default", weight=3, limit={GPU: 2}))
    assert tree.spec("default").limit == {GPU: 2}


def test_an_invalid_default_queue_is_not_replaced_by_an_unbounded_one() -> None:
    tree, problems = build(QueueSpec("default", parent="missing", limit={GPU: 2}))
    assert "default" not in tree
    assert problems["default"].field == "spec.parent"


def test_cycles_are_reported_and_left_out_with_everything_below_them() -> None:
    tree, problems = build(
        QueueSpec("a", parent="b"),
        QueueSpec("b", parent="c"),
        QueueSpec("c", parent="a"),
        QueueSpec("under-a", parent="a"),
        QueueSpec("self", parent="self"),
        QueueSpec("fine"),
        QueueSpec("fine-child", parent="fine"),
    )
    assert sorted(problems) == ["a", "b", "c", "self", "under-a"]
    assert "a -> b -> c -> a" in problems["a"].reason
    assert "cycle" in problems["self"].reason
    assert "'a'" in problems["under-a"].reason
    assert all(problem.field == "spec.parent" for problem in problems.values())
    assert list(tree) == ["default", "fine", "fine-child"]
    assert tree.leaves() == ["default", "fine-child"]


def test_an_unknown_parent_is_reported_and_the_rest_still_works() -> None:
    tree, problems = build(
        QueueSpec("orphan", parent="nowhere"),
        QueueSpec("orphan-child", parent="orphan"),
        QueueSpec("team", guaranteed={GPU: 4}),
    )
    assert problems["orphan"].field == "spec.parent"
    assert "'nowhere' does not exist" in problems["orphan"].reason
    assert "orphan" in problems["orphan-child"].reason
    assert tree.leaves() == ["default", "team"]
    assert tree.guaranteed("team") == {GPU: 4}


def test_children_whose_guarantees_exceed_the_parent_limit_are_left_out_by_name() -> None:
    tree, problems = build(
        QueueSpec("org", limit={GPU: 10}),
        QueueSpec("a", parent="org", guaranteed={GPU: 4}),
        QueueSpec("b", parent="org", guaranteed={GPU: 4}),
        QueueSpec("c", parent="org", guaranteed={GPU: 4}),
        QueueSpec("c-child", parent="c"),
        QueueSpec("d", parent="org", guaranteed={GPU: 2}),
    )
    # a + b = 8 fit; c would make 12 > 10 and is left out with its child; d still fits (10).
    assert sorted(problems) == ["c", "c-child"]
    assert problems["c"].field == f"spec.guaranteed.{GPU}"
    assert "org" in problems["c"].reason and "10" in problems["c"].reason
    assert tree.children("org") == ["a", "b", "d"]
    assert tree.guaranteed("org") == {GPU: 10}


def test_children_whose_guarantees_exceed_the_parent_guarantee_are_left_out() -> None:
    tree, problems = build(
        QueueSpec("org", guaranteed={GPU: 6}),
        QueueSpec("a", parent="org", guaranteed={GPU: 4}),
        QueueSpec("b", parent="org", guaranteed={GPU: 4}),
    )
    assert sorted(problems) == ["b"]
    assert tree.children("org") == ["a"]


def test_a_parent_that_does_not_borrow_bounds_its_children_guarantees() -> None:
    _, problems = build(
        QueueSpec("org", guaranteed={"cpu": 1000}, borrowing_limit={GPU: 3}),
        QueueSpec("a", parent="org", guaranteed={GPU: 4}),
    )
    assert problems["a"].field == f"spec.guaranteed.{GPU}"


def test_a_second_queue_of_the_same_name_is_reported_and_the_first_kept() -> None:
    tree, problems = QueueTree.build([QueueSpec("q", weight=2), QueueSpec("q", weight=5)])
    assert [(p.obj, p.field) for p in problems] == [("queue q", "metadata.name")]
    assert tree.spec("q").weight == 2


NAMES = [f"q{i}" for i in range(8)]


@st.composite
def forests(draw: st.DrawFn) -> list[QueueSpec]:
    """Any parent links at all (cycles, unknown parents) and guarantees and limits that may not nest."""
    specs = []
    for name in draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=1, max_size=8)):
        parent = draw(st.sampled_from(["", "", "missing", *NAMES]))
        guaranteed = draw(st.dictionaries(st.sampled_from([GPU, "cpu"]), st.integers(0, 8), max_size=2))
        limit = {name: amount + draw(st.integers(0, 8)) for name, amount in guaranteed.items() if draw(st.booleans())}
        specs.append(QueueSpec(name, parent=parent, guaranteed=guaranteed, limit=limit))
    return specs


@settings(max_examples=300, deadline=None)
@given(forests())
def test_any_set_of_queues_builds_a_sound_tree_and_reports_every_queue_left_out(specs: list[QueueSpec]) -> None:
    tree, problems = QueueTree.build(specs)
    reported = {problem.obj.removeprefix("queue ") for problem in problems}
    given_names = {spec.name for spec in specs}
    # Every queue is either in the tree or reported, never both; the implied default is the only addition.
    assert reported | set(tree) == given_names | {"default"}
    assert not reported & set(tree)
    for name in tree:
        chain = tree.ancestors(name)
        assert len(chain) == len(set(chain)) and name not in chain
        assert all(ancestor in tree for ancestor in chain)
        children = tree.children(name)
        assert all(tree.parent(child) == name for child in children)
        for resource in {r for child in children for r in tree.guaranteed(child)}:
            total = sum(tree.guaranteed(child).get(resource, 0) for child in children)
            assert total <= tree.guaranteed(name).get(resource, 0)
            assert total <= tree.spec(name).ceiling().get(resource, total)
    assert sorted(tree.leaves()) == sorted(name for name in tree if not tree.children(name))
