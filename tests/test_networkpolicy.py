"""manifests/networkpolicy.yaml: the scheduler's pods take connections on the metrics and health ports only (the
dashboard's port, when given, is reached by port-forward), and the kustomization ships the policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def load(name: str) -> Any:
    return yaml.safe_load((MANIFESTS / name).read_text())


def test_only_the_metrics_and_health_ports_are_open_on_the_schedulers_pods() -> None:
    policy = load("networkpolicy.yaml")
    deployment = load("deployment.yaml")
    template = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert "from" not in rule  # from anywhere: the kubelet, the API server's pod proxy, Prometheus
    opened = {port["port"] for port in rule["ports"]}
    (container,) = template["spec"]["containers"]
    declared = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert opened == {"metrics", "health"} == set(declared)
    args = " ".join(container["args"])
    assert f"--metrics-port={declared['metrics']}" in args and f"--health-port={declared['health']}" in args
    assert "networkpolicy.yaml" in load("kustomization.yaml")["resources"]
