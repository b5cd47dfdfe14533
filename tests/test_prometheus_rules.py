"""manifests/prometheus-rules.yaml: the alert and recording rules are valid Prometheus rules, each alert fires on
the series that mean trouble and stays quiet short of them (``promtool test rules`` on
tests/prometheus/rules-test.yaml, with Debian's promtool from tests/e2e/build-prometheus.sh), and every metric
they read is one gpusched exports (a renamed metric would leave an alert that can never fire)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e import skips
from tests.test_dashboard import NAME, exported

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "manifests" / "prometheus-rules.yaml"
RULE_TESTS = REPO / "tests" / "prometheus" / "rules-test.yaml"
#: A recording rule's name (level:metric:operations), which alerts read like a metric.
RECORDED = re.compile(r"\bgpusched:[a-z_]+:[a-z0-9_]+\b")


def rules() -> list[dict[str, str]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def promtool() -> Path:
    return skips.prometheus() / "promtool"


def _promtool(promtool: Path, *args: str, cwd: Path) -> str:
    proc = subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, f"promtool {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_promtool_finds_the_rules_valid(promtool: Path) -> None:
    out = _promtool(promtool, "check", "rules", str(RULES), cwd=REPO)
    assert f"SUCCESS: {len(rules())} rules found" in out


def test_every_alert_fires_when_it_should_and_only_then(promtool: Path) -> None:
    out = _promtool(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert "SUCCESS" in out


def test_every_alert_has_a_test_and_a_section_in_the_docs() -> None:
    alerts = [rule["alert"] for rule in rules() if "alert" in rule]
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    docs = (REPO / "docs" / "operator.md").read_text()
    assert sorted(set(alerts) - tested) == []
    assert [alert for alert in alerts if f"`{alert}`" not in docs] == []


def test_the_rules_read_only_metrics_gpusched_exports() -> None:
    names = exported()
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    read = {name for rule in rules() for name in NAME.findall(rule["expr"])}
    assert read, "no metric found in the rules"
    assert sorted(read - names) == []
    used = {name for rule in rules() for name in RECORDED.findall(rule["expr"])}
    assert sorted(used - recorded) == []
