"""Profiles: the packaged default, a file over it, and errors that name the field at fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.core.extension_points import Framework
from scheduler.framework import profile
from scheduler.framework.profile import PluginConfig


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


def test_the_default_profile_loads_and_builds() -> None:
    config = profile.load()
    assert config.name == "gpusched"
    assert config.tie_break == "first"
    assert config.seed == 0
    assert [p.name for p in config.plugins] == [
        "node_rules",
        "fit",
        "ports",
        "volumes",
        "interpod",
        "topology_spread",
        "gpu",
        "dra",
        "numa",
        "fgd",
        "gang",
        "topology",
    ]
    assert config.plugins[6] == PluginConfig("gpu", 1.0, {"device": "hint"})
    fw = Framework.build(config)
    assert [p.name for p in fw.filters] == [
        "node_rules",
        "fit",
        "ports",
        "volumes",
        "interpod",
        "topology_spread",
        "dra",
        "numa",
        "topology",
    ]
    assert [p.name for p in fw.pre_filters] == ["volumes", "dra", "topology"]
    assert [(s[0].name, s[1]) for s in fw.scorers] == [
        ("node_rules", 50.0),
        ("interpod", 100.0),
        ("topology_spread", 50.0),
        ("numa", 50.0),
        ("fgd", 100.0),
        ("gang", 50.0),
        ("topology", 50.0),
    ]
    assert [p.name for p in fw.reservers] == ["volumes", "gpu", "dra"]


def test_the_removed_reservation_plugin_is_a_clear_error(tmp_path: Path) -> None:
    # Nominations and reservations are the core's now: a profile cannot leave them out, nor name them.
    config = profile.load(_write(tmp_path, "plugins:\n  - name: fit\n  - name: reservation\n"))
    with pytest.raises(InvalidObject, match=r"plugins\[1\]\.name.*no longer a plugin"):
        Framework.build(config)


def test_a_file_overrides_only_what_it_says(tmp_path: Path) -> None:
    config = profile.load(_write(tmp_path, "tieBreak: random\nseed: 42\n"))
    assert (config.tie_break, config.seed) == ("random", 42)
    assert [p.name for p in config.plugins] == [
        "node_rules",
        "fit",
        "ports",
        "volumes",
        "interpod",
        "topology_spread",
        "gpu",
        "dra",
        "numa",
        "fgd",
        "gang",
        "topology",
    ]


def test_a_file_can_replace_the_plugins(tmp_path: Path) -> None:
    text = """
name: packer
plugins:
  - fit
  - name: gpu
    args: {device: bestfit}
  - name: binpack
    weight: 2
    args:
      weights: {cpu: 1, nvidia.com/gpu: 3}
  - name: spread
    weight: 0
"""
    config = profile.load(_write(tmp_path, text))
    assert config.name == "packer"
    assert [(p.name, p.weight) for p in config.plugins] == [("fit", 1), ("gpu", 1), ("binpack", 2), ("spread", 0)]
    fw = Framework.build(config)
    assert [(s[0].name, s[1]) for s in fw.scorers] == [("binpack", 2.0)]  # weight 0 turns a scorer off


def test_the_default_profile_runs_every_action_least_disruptive_first(tmp_path: Path) -> None:
    assert profile.load().actions == ("allocate", "reclaim", "preempt")
    assert profile.load(_write(tmp_path, "actions: [allocate, preempt]\n")).actions == ("allocate", "preempt")


def test_actions_are_a_list_of_names_each_once_which_names_the_core_checks(tmp_path: Path) -> None:
    # Like a plugin's, an action's name is the core's to know (``scheduler.core.actions.registry``): a profile may name
    # one that is registered later; building the profile refuses one that is not (tests/core/test_actions.py).
    assert profile.load(_write(tmp_path, "actions: [allocate, backfill]\n")).actions == ("allocate", "backfill")


def test_consolidate_is_named_and_tuned_in_a_profile_not_in_the_default(tmp_path: Path) -> None:
    assert "consolidate" not in profile.load().actions
    text = (
        "actions: [allocate, consolidate, preempt]\n"
        "consolidation: {maxPodsPerNode: 1, cooldownSeconds: 60, defragmentEverySeconds: 300, maxPodsPerWholeNode: 0,"
        " stepTimeoutSeconds: 300}\n"
    )
    loaded = profile.load(_write(tmp_path, text))
    assert loaded.actions == ("allocate", "consolidate", "preempt")
    assert loaded.consolidation == profile.ConsolidationConfig(
        max_pods_per_node=1, cooldown_s=60, defragment_every_s=300, max_pods_per_whole_node=0, step_timeout_s=300
    )
    assert profile.load().consolidation.defragment_every_s == 0  # background defragmentation is off by default
    assert profile.load().consolidation.step_timeout_s == 120  # a plan's step is given two minutes by default
    with pytest.raises(InvalidObject, match=r"consolidation\.stepTimeoutSeconds: 0 is not a whole number >= 1"):
        profile.consolidation({"stepTimeoutSeconds": 0}, "--consolidation")


def test_plan_cost_is_one_of_its_names_and_a_yaml_boolean_is_refused_by_name(tmp_path: Path) -> None:
    assert profile.load().consolidation.plan_cost == "FewerGPUsAndPods"
    loaded = profile.load(_write(tmp_path, "consolidation: {planCost: FewerGPUsAndPodsOrOne}\n"))
    assert loaded.consolidation.plan_cost == "FewerGPUsAndPodsOrOne"
    # YAML reads Off as false: named, with the values it may take.
    with pytest.raises(InvalidObject, match=r"consolidation\.planCost: False is not one of FewerGPUsAndPods, .*Any"):
        profile.load(_write(tmp_path, "consolidation: {planCost: Off}\n"))
    with pytest.raises(InvalidObject, match=r"consolidation\.planCost"):
        profile.consolidation({"planCost": "fewer"}, "--consolidation")


def test_an_empty_file_is_the_default(tmp_path: Path) -> None:
    assert profile.load(_write(tmp_path, "")) == profile.load()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("tiebreak: first\n", "tiebreak"),
        ("tieBreak: last\n", "tieBreak"),
        ("seed: one\n", "seed"),
        ("seed: -1\n", "seed"),
        ("name: ''\n", "name"),
        ("plugins: []\n", "plugins"),
        ("plugins: [fit, {name: spread, weight: -1}]\n", "plugins[1].weight"),
        ("plugins: [fit, {name: spread, weight: .nan}]\n", "plugins[1].weight"),
        ("plugins: [fit, {name: spread, weight: .inf}]\n", "plugins[1].weight"),
        ("plugins: [fit, {name: spread, weight: true}]\n", "plugins[1].weight"),
        ("plugins: [fit, {name: spread, wieght: 2}]\n", "plugins[1].wieght"),
        ("plugins: [fit, fit]\n", "plugins[1].name"),
        ("plugins: [fit, {name: spread, args: [1]}]\n", "plugins[1].args"),
        ("plugins: [fit, 3]\n", "plugins[1]"),
        ("actions: []\n", "actions"),
        ("actions: allocate\n", "actions"),
        ("actions: [allocate, 3]\n", "actions[1]"),
        ("consolidation: {maxPodsPerPlan: 0}\n", "consolidation.maxPodsPerPlan"),
        ("consolidation: {cooldown: 5}\n", "consolidation.cooldown"),
        ("consolidation: {maxPodsPerWholeNode: -1}\n", "consolidation.maxPodsPerWholeNode"),
        ("consolidation: {maxPodsPerWholeNode: 2.5}\n", "consolidation.maxPodsPerWholeNode"),
        ("consolidation: [1]\n", "consolidation"),
        ("actions: [allocate, preempt, preempt]\n", "actions[2]"),
    ],
)
def test_bad_profiles_name_the_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidObject) as err:
        profile.load(path)
    assert err.value.field == field
    assert err.value.obj == f"profile {path}"
    assert field in str(err.value)


def test_files_that_are_not_profiles(tmp_path: Path) -> None:
    with pytest.raises(InvalidObject, match="cannot read"):
        profile.load(tmp_path / "missing.yaml")
    with pytest.raises(InvalidObject, match="not valid YAML"):
        profile.load(_write(tmp_path, "plugins: [fit\n"))
    with pytest.raises(InvalidObject, match="must be a map"):
        profile.load(_write(tmp_path, "- fit\n"))


def _build(plugins: list[Any]) -> Framework:
    return Framework.build(profile.parse({"name": "p", "plugins": plugins}))


@pytest.mark.parametrize(
    ("plugins", "field", "words"),
    [
        (["fit", "fragmentation"], "plugins[1].name", "unknown plugin 'fragmentation'"),
        (["fit", {"name": "balance", "args": {"low": 0.9, "high": 0.5}}], "plugins[1].args.low", "low"),
        (["fit", {"name": "balance", "args": {"high": 1.5}}], "plugins[1].args.high", "1.5"),
        (["fit", {"name": "balance", "args": {"weights": {"cpu": -1}}}], "plugins[1].args.weights.cpu", "-1"),
        (["fit", {"name": "binpack", "args": {"weigths": {}}}], "plugins[1].args.weigths", "unknown argument"),
        (["fit", {"name": "gpu", "args": {"device": "best"}}], "plugins[1].args.device", "'best'"),
        (["fit", {"name": "fgd", "args": {"coverage": 0}}], "plugins[1].args.coverage", "0"),
        (
            ["fit", {"name": "fgd", "args": {"typical": [{"gpus": 2, "milli": 5}]}}],
            "plugins[1].args.typical[0].milli",
            "",
        ),
        (
            ["fit", {"name": "resource_strategy", "args": {"resources": {"cpu": {"type": "Most"}}}}],
            "plugins[1].args.resources.cpu.type",
            "type",
        ),
        (
            [
                "fit",
                {"name": "resource_strategy", "args": {"resources": {"cpu": {"type": "MostAllocated", "weight": -2}}}},
            ],
            "plugins[1].args.resources.cpu.weight",
            "-2",
        ),
        (["fit", {"name": "scarce_avoidance", "args": {"resources": "gpu"}}], "plugins[1].args.resources", "list"),
        (["spread"], "plugins", "filter"),
    ],
)
def test_plugin_errors_name_the_profile_and_field(plugins: list[Any], field: str, words: str) -> None:
    with pytest.raises(InvalidObject) as err:
        _build(plugins)
    assert err.value.field == field
    assert err.value.obj == "profile p"
    assert field in str(err.value) and words in str(err.value)


def test_every_registered_plugin_builds_with_its_defaults() -> None:
    from scheduler.core import registry

    for name in registry.PLUGINS:
        fw = _build(["fit"] if name == "fit" else ["fit", name])
        assert fw.filters
