"""The operator's config file: defaults, overrides, and errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.api.basics.errors import InvalidObject
from scheduler.k8s import config


def test_defaults_are_the_contract() -> None:
    c = config.load(None)
    assert (c.binding.concurrency, c.binding.qps, c.binding.burst, c.binding.timeout_s) == (64, 200, 400, 10)
    assert (c.backoff.initial_s, c.backoff.max_s) == (1, 10)
    assert c.reserve_after_s is None
    e = c.leader_election
    assert (e.enabled, e.lease_duration_s, e.renew_deadline_s, e.retry_period_s) == (True, 15, 10, 2)
    assert "fgd" in [p.name for p in c.profile.plugins]


def test_a_file_overrides_what_it_names(tmp_path: Path) -> None:
    path = tmp_path / "gpusched.yaml"
    path.write_text(
        "profile: {plugins: [fit, gpu, {name: binpack, weight: 2}]}\n"
        "binding: {concurrency: 8}\n"
        "reservations: {afterSeconds: 300}\n"
        "leaderElection: {enabled: false}\n"
    )
    c = config.load(path)
    assert [p.name for p in c.profile.plugins] == ["fit", "gpu", "binpack"]
    assert c.profile.name == "gpusched"  # keys the file leaves out keep the default profile's
    assert c.binding.concurrency == 8 and c.binding.qps == 200
    assert c.reserve_after_s == 300
    assert not c.leader_election.enabled


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("bindings: {}", "bindings"),
        ("binding: {concurency: 8}", "binding.concurency"),
        ("binding: {qps: 0}", "binding.qps"),
        ("backoff: {initialSeconds: 5, maxSeconds: 1}", "backoff.maxSeconds"),
        ("leaderElection: {renewDeadlineSeconds: 20}", "leaderElection"),
        ("profile: {plugins: [nosuch]}", None),
        ("profile: {plugins: [{name: fit, wieght: 1}]}", "profile.plugins[0].wieght"),
    ],
)
def test_errors_name_the_file_and_key(tmp_path: Path, text: str, field: str | None) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text + "\n")
    if field is None:  # plugin names are checked when the profile is built
        from scheduler.core.extension_points import Framework

        with pytest.raises(InvalidObject, match="unknown plugin 'nosuch'"):
            Framework.build(config.load(path).profile)
        return
    with pytest.raises(InvalidObject) as info:
        config.load(path)
    assert info.value.obj == f"config {path}"
    assert info.value.field == field


def test_the_shipped_config_map_parses() -> None:
    shipped = Path(__file__).resolve().parents[2] / "manifests" / "gpusched.yaml"
    assert config.load(shipped) == config.load(None)
