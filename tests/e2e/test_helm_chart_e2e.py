"""charts/gpusched checked by Helm itself (tests/e2e/build-helm.sh builds it from ``helm.sh/helm/v4``): ``helm lint
--strict``, ``helm template``, the chart with its default values rendering the objects ``kubectl kustomize
manifests/`` renders, and a real ``helm install`` and ``helm uninstall`` on the local control plane.

The chart and manifests/ are two spellings of one install; when one changes without the other (a rule added to
manifests/rbac.yaml, a new object), the comparison names each object and field where they part. What differs on
purpose is taken out first, by :func:`normalised` (its docstring lists it).

Without Helm (no Go to build it) the tests skip with the reason, or fail under ``GPUSCHED_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler import cli
from scheduler.k8s import config as k8s_config
from scheduler.k8s.serve import dashboard_options
from tests.e2e import kube as kube_mod
from tests.e2e import skips
from tests.e2e.localcluster import APIError, cached_binaries

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.e2e

REPO = HERE.parent.parent
CHART = REPO / "charts" / "gpusched"
MANIFESTS = REPO / "manifests"
NAMESPACE = "gpusched-system"

#: Labels Helm charts put on every object on top of manifests/' own (app.kubernetes.io/name and part-of).
HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
#: kustomize's configMapGenerator suffix: a hash of the content, 10 characters.
HASH_SUFFIX = re.compile(r"-[a-z0-9]{10}$")

Key = tuple[str, str, str]


@pytest.fixture(scope="module")
def helm() -> Path:
    return skips.helm()


def _run(argv: list[str], *, timeout: float = 120) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _template(helm: Path, *values: str, namespace: str = NAMESPACE, release: str = "gpusched") -> list[dict[str, Any]]:
    """``helm template`` of the chart, CRDs included, as objects."""
    argv = [str(helm), "template", release, str(CHART), "--namespace", namespace, "--include-crds"]
    for value in values:
        argv += ["--set", value]
    return [doc for doc in yaml.safe_load_all(_run(argv)) if doc]


def _kustomize() -> list[dict[str, Any]]:
    """``kubectl kustomize manifests/`` with the control plane's kubectl (``GPUSCHED_E2E_BIN``, the cache, or what
    build-controlplane.sh builds)."""
    bin_dir = cached_binaries() or skips.made_by(HERE / "build-controlplane.sh", failed="failed", timeout=3600)
    return [doc for doc in yaml.safe_load_all(_run([str(bin_dir / "kubectl"), "kustomize", str(MANIFESTS)])) if doc]


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta["name"], meta.get("namespace", "")


def _config_of(obj: Mapping[str, Any], tmp: Path) -> k8s_config.OperatorConfig:
    """What gpusched run reads from a ConfigMap's gpusched.yaml (its own loader: defaults filled, profile parsed)."""
    path = tmp / f"{obj['metadata']['name']}.yaml"
    path.write_text(obj["data"]["gpusched.yaml"])
    return k8s_config.load(path)


def normalised(objects: list[dict[str, Any]], *, chart: bool) -> dict[Key, dict[str, Any]]:
    """Objects by (kind, name, namespace), with what differs on purpose between the chart and kustomize taken out:

    - the config's ConfigMap: kustomize's generator names it ``gpusched-config-<hash of its content>`` so that a
      change rolls the pods; the chart names it ``gpusched-config`` and puts the content's checksum on the pod
      template (``checksum/config``) instead. The suffix (in the name and in the Deployment's volume) and the
      annotation are dropped. Its ``gpusched.yaml`` is compared as the config gpusched reads from it (its own
      loader's result): Helm renders the values' YAML, without manifests/gpusched.yaml's comments and layout and
      without its explicit nulls (``afterSeconds: null``, the default, which Helm drops from values).
    - labels: Helm's own (:data:`HELM_LABELS`) are dropped from the chart's objects; the CRDs, which Helm installs
      from crds/ as they are, carry no labels, while kustomize puts its ``labels`` on them too: dropped there.
    - the Namespace: kustomize renders manifests/namespace.yaml; the chart leaves it to ``helm install
      --create-namespace`` unless ``namespace.create=true`` (compared separately).
    """
    out: dict[Key, dict[str, Any]] = {}
    for obj in objects:
        obj = yaml.safe_load(yaml.safe_dump(obj))  # a deep copy
        meta = obj["metadata"]
        if obj["kind"] == "ConfigMap":
            meta["name"] = HASH_SUFFIX.sub("", meta["name"])
            obj["data"] = {
                name: k8s_config.parse(yaml.safe_load(text) or {}, source=name) for name, text in obj["data"].items()
            }
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            annotations = template["metadata"].pop("annotations", {})
            annotations.pop("checksum/config", None)
            if annotations:
                template["metadata"]["annotations"] = annotations
            for volume in template["spec"].get("volumes", []):
                if "configMap" in volume:
                    volume["configMap"]["name"] = HASH_SUFFIX.sub("", volume["configMap"]["name"])
        labels = meta.get("labels", {})
        if chart:
            for label in HELM_LABELS:
                labels.pop(label, None)
        if obj["kind"] == "CustomResourceDefinition":
            labels.clear()
        if not labels:
            meta.pop("labels", None)
        out[_key(obj)] = obj
    return out


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two objects part, one line per field: ``spec.replicas: 2 != 3``."""
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        lines: list[str] = []
        for key in sorted(set(left) | set(right), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in left:
                lines.append(f"{where}: only in the chart: {right[key]!r}"[:300])
            elif key not in right:
                lines.append(f"{where}: only in manifests/: {left[key]!r}"[:300])
            else:
                lines += differences(left[key], right[key], where)
        return lines
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            line for i, (a, b) in enumerate(zip(left, right, strict=True)) for line in differences(a, b, f"{path}[{i}]")
        ]
    if isinstance(left, list) and isinstance(right, list):  # an item added or removed on one side: name it
        return [f"{path}: only in manifests/: {item!r}"[:400] for item in left if item not in right] + [
            f"{path}: only in the chart: {item!r}"[:400] for item in right if item not in left
        ] or [f"{path}: the same items in another order"]
    return [] if left == right else [f"{path}: manifests/ {left!r} != chart {right!r}"[:400]]


def test_helm_lint_strict(helm: Path) -> None:
    """The defaults, and the optional parts turned on (ServiceMonitor, PrometheusRule, the dashboard with each access
    mode)."""
    _run([str(helm), "lint", "--strict", str(CHART)])
    for values in (
        ["metrics.serviceMonitor.enabled=true", "dashboard.enabled=true", "prometheusRule.enabled=true"],
        ["dashboard.enabled=true", "dashboard.auth=token", "dashboard.tokenSecret.name=viewers", "replicas=1"],
        ["podAntiAffinity=preferred", "podDisruptionBudget.enabled=false", "profile.seed=7"],
    ):
        _run([str(helm), "lint", "--strict", str(CHART), *[arg for v in values for arg in ("--set", v)]])


def test_the_chart_renders_what_manifests_render(helm: Path) -> None:
    """The chart with its default values and ``kubectl kustomize manifests/``: the same objects, field by field,
    after :func:`normalised`. A failure lists every object and field where the two part."""
    shipped = normalised(_kustomize(), chart=False)
    charted = normalised(_template(helm), chart=True)
    namespace: Key = ("Namespace", NAMESPACE, "")
    only_manifests = sorted(set(shipped) - set(charted) - {namespace})
    only_chart = sorted(set(charted) - set(shipped))
    parted = {key: differences(shipped[key], charted[key]) for key in sorted(set(shipped) & set(charted))}
    report = [f"only in manifests/: {key}" for key in only_manifests] + [
        f"only in the chart: {key}" for key in only_chart
    ]
    report += [f"{kind}/{name}: {line}" for (kind, name, _), lines in parted.items() for line in lines]
    assert not report, "the chart and manifests/ render different objects:\n" + "\n".join(report)
    assert {key[0] for key in charted} >= {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    }

    with_namespace = normalised(_template(helm, "namespace.create=true"), chart=True)
    assert with_namespace[namespace] == shipped[namespace]


def test_the_chart_config_is_the_shipped_config(helm: Path, tmp_path: Path) -> None:
    """gpusched reads the same config from the chart's ConfigMap as from manifests/gpusched.yaml; values override
    it key by key, and a profile given as a value reaches the scheduler."""
    (configmap,) = [o for o in _template(helm) if o["kind"] == "ConfigMap"]
    assert _config_of(configmap, tmp_path) == k8s_config.load(MANIFESTS / "gpusched.yaml")

    (changed,) = [
        o
        for o in _template(helm, "config.binding.qps=50", "config.reservations.afterSeconds=120", "profile.seed=7")
        if o["kind"] == "ConfigMap"
    ]
    config = _config_of(changed, tmp_path)
    assert (config.binding.qps, config.binding.burst) == (50, 400)
    assert config.reserve_after_s == 120
    assert config.profile.seed == 7


def test_a_config_change_rolls_the_pods(helm: Path) -> None:
    def checksum(*values: str) -> str:
        (deployment,) = [o for o in _template(helm, *values) if o["kind"] == "Deployment"]
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum() == checksum("replicas=3")
    assert checksum() != checksum("config.backoff.maxSeconds=30")


def test_settings_that_do_not_go_together_are_refused_with_a_reason(helm: Path) -> None:
    cases = {
        ("replicas=2", "config.leaderElection.enabled=false"): "needs config.leaderElection.enabled",
        ("podAntiAffinity=sometimes",): "podAntiAffinity must be required or preferred",
        ("dashboard.enabled=true", "dashboard.auth=token"): "needs dashboard.tokenSecret.name",
        ("dashboard.enabled=true", "dashboard.auth=oidc"): "dashboard.auth must be none, token or kubernetes",
    }
    for values, reason in cases.items():
        argv = [str(helm), "template", "gpusched", str(CHART), *[arg for v in values for arg in ("--set", v)]]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert proc.returncode != 0 and reason in proc.stderr, (values, proc.stderr)


def test_the_dashboard_and_its_access_are_values(helm: Path) -> None:
    """The dashboard on with each access mode: the flags gpusched run checks (scheduler/k8s/serve/dashboard_options.py),
    its port, and what each mode needs (auth-delegator for kubernetes, the token's Secret mounted for token)."""

    def rendered(*values: str) -> tuple[dict[str, Any], dict[Key, dict[str, Any]]]:
        objects = _template(helm, "dashboard.enabled=true", *values)
        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        return deployment["spec"]["template"]["spec"], {_key(o): o for o in objects}

    pod, objects = rendered()
    (container,) = pod["containers"]
    assert "--dashboard-port=8082" in container["args"] and "--dashboard-auth=kubernetes" in container["args"]
    assert {"name": "dashboard", "containerPort": 8082} in container["ports"]
    delegator = objects[("ClusterRoleBinding", "gpusched-auth-delegator", "")]
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"] == [{"kind": "ServiceAccount", "name": "gpusched", "namespace": NAMESPACE}]
    viewer = objects[("ClusterRole", "gpusched-dashboard-viewer", "")]
    assert viewer["rules"] == [{"nonResourceURLs": ["/dashboard"], "verbs": ["get"]}]

    pod, objects = rendered("dashboard.auth=token", "dashboard.tokenSecret.name=viewers", "dashboard.port=9000")
    (container,) = pod["containers"]
    assert "--dashboard-port=9000" in container["args"] and "--dashboard-auth=token" in container["args"]
    assert "--dashboard-token-file=/etc/gpusched-dashboard/token" in container["args"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "dashboard-token"]
    assert volume["secret"]["secretName"] == "viewers"
    # The auth-delegator binding is there in every mode: /explain asks who asks (manifests/rbac.yaml).
    assert ("ClusterRoleBinding", "gpusched-auth-delegator", "") in objects

    pod, _ = rendered("dashboard.auth=none")
    assert "--dashboard-auth=none" in pod["containers"][0]["args"]


def test_gpusched_run_accepts_the_arguments_the_chart_renders(helm: Path, tmp_path: Path) -> None:
    """The container's arguments parsed by gpusched run's own command line and dashboard checks
    (scheduler/k8s/serve/dashboard_options.py), so a renamed or removed flag fails here and not in a crash-looping
    pod."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    cases: dict[tuple[str, ...], tuple[int | None, str]] = {
        (): (None, "none"),
        ("dashboard.enabled=true",): (8082, "kubernetes"),
        ("dashboard.enabled=true", "dashboard.auth=none", "dashboard.port=9000"): (9000, "none"),
        ("dashboard.enabled=true", "dashboard.auth=token", "dashboard.tokenSecret.name=viewers"): (8082, "token"),
        ("leaderElection.leaseName=pool-a", "metrics.port=9090", "health.port=9091"): (None, "none"),
    }
    for values, (port, mode) in cases.items():
        (deployment,) = [o for o in _template(helm, *values) if o["kind"] == "Deployment"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        argv = [
            f"--dashboard-token-file={token}" if arg.startswith("--dashboard-token-file=") else arg
            for arg in container["args"]
        ]
        args = cli.build_parser("run").parse_args(argv)
        dashboard_options.check_arguments(args)
        assert (args.dashboard_port, dashboard_options.mode(args)) == (port, mode), values
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert (ports["metrics"], ports["health"]) == (args.metrics_port, args.health_port)


def test_a_lease_name_of_its_own_is_passed_and_granted(helm: Path) -> None:
    """The Role grants get/update on the one Lease gpusched run is told to use, whatever its name."""
    for lease, wanted_arg in (("gpusched", None), ("gpusched-gpu-pool", "--lease-name=gpusched-gpu-pool")):
        objects = _template(helm, f"leaderElection.leaseName={lease}")
        (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert [a for a in args if a.startswith("--lease-name")] == ([wanted_arg] if wanted_arg else [])
        (role,) = [o for o in objects if o["kind"] == "Role"]
        assert [r.get("resourceNames") for r in role["rules"]] == [None, [lease]]


def test_the_service_monitor_is_off_by_default_and_scrapes_the_metrics_service(helm: Path) -> None:
    assert not [o for o in _template(helm) if o["kind"] == "ServiceMonitor"]
    objects = _template(helm, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom")
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    (service,) = [o for o in objects if o["kind"] == "Service"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"


def test_the_prometheus_rule_is_off_by_default_and_carries_the_shipped_rules(helm: Path) -> None:
    """``prometheusRule.enabled=true`` renders a PrometheusRule whose spec is manifests/prometheus-rules.yaml, every
    rule and annotation as written (the alerts' ``{{ $labels }}`` templates are Prometheus', not Helm's)."""
    assert not [o for o in _template(helm) if o["kind"] == "PrometheusRule"]
    objects = _template(helm, "prometheusRule.enabled=true", "prometheusRule.labels.release=prom")
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["metadata"]["namespace"] == NAMESPACE
    shipped = yaml.safe_load((MANIFESTS / "prometheus-rules.yaml").read_text())
    assert differences(shipped, rule["spec"]) == []


# ---- helm install on the local control plane ------------------------------------------------------------------


@pytest.fixture
def installed(helm: Path, scenario: kube_mod.Scenario) -> Iterator[tuple[kube_mod.Scenario, list[str]]]:
    """The chart installed in the scenario's namespace as release ``gpusched-e2e``, with values of its own; the
    release is uninstalled at the end if the test did not."""
    base = [str(helm), f"--kubeconfig={scenario.kube.kubeconfig}", "--namespace", scenario.namespace]
    values = [
        "replicas=3",
        "image.repository=registry.example/gpusched",
        "image.tag=e2e",
        "resources.requests.cpu=500m",
        "resources.limits.memory=2Gi",
        "config.binding.qps=50",
        "dashboard.enabled=true",
    ]
    # No --wait: the pods are never Ready (the image does not exist here and kwok nodes run nothing).
    _run([*base, "install", "gpusched-e2e", str(CHART), *[a for v in values for a in ("--set", v)]], timeout=300)
    try:
        yield scenario, base
    finally:
        subprocess.run([*base, "uninstall", "gpusched-e2e", "--ignore-not-found"], capture_output=True, timeout=300)


def _exists(kube: kube_mod.Kube, path: str) -> bool:
    try:
        kube.request("GET", path)
    except APIError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_helm_install_upgrade_and_uninstall_on_a_real_api_server(
    installed: tuple[kube_mod.Scenario, list[str]],
) -> None:
    scenario, helm_base = installed
    kube, ns = scenario.kube, scenario.namespace
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    objects = [
        f"/api/v1/namespaces/{ns}/serviceaccounts/gpusched-e2e",
        f"/api/v1/namespaces/{ns}/configmaps/gpusched-e2e-config",
        f"/api/v1/namespaces/{ns}/services/gpusched-e2e-metrics",
        f"/apis/apps/v1/namespaces/{ns}/deployments/gpusched-e2e",
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/gpusched-e2e",
        f"{rbac}/clusterroles/gpusched-e2e",
        f"{rbac}/clusterrolebindings/gpusched-e2e",
        f"{rbac}/clusterrolebindings/gpusched-e2e-auth-delegator",
        f"{rbac}/clusterroles/gpusched-e2e-dashboard-viewer",
        f"{rbac}/namespaces/{ns}/roles/gpusched-e2e-leader-election",
        f"{rbac}/namespaces/{ns}/rolebindings/gpusched-e2e-leader-election",
    ]
    missing = [path for path in objects if not _exists(kube, path)]
    assert not missing, f"helm install made none of {missing}"

    status = yaml.safe_load(_run([*helm_base, "status", "gpusched-e2e", "--output", "yaml"]))
    assert status["info"]["status"] == "deployed"

    deployment = kube.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/gpusched-e2e")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/gpusched:e2e"
    assert pod["initContainers"][0]["image"] == "registry.example/gpusched:e2e"
    assert container["resources"]["requests"]["cpu"] == "500m"
    assert container["resources"]["limits"]["memory"] == "2Gi"
    assert "--dashboard-port=8082" in container["args"]
    assert pod["serviceAccountName"] == "gpusched-e2e"
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    binding = kube.request("GET", f"{rbac}/clusterrolebindings/gpusched-e2e")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpusched-e2e", "namespace": ns}]
    configmap = kube.request("GET", f"/api/v1/namespaces/{ns}/configmaps/gpusched-e2e-config")
    assert yaml.safe_load(configmap["data"]["gpusched.yaml"])["binding"]["qps"] == 50

    # A config change through `helm upgrade` reaches the ConfigMap and rolls the pods (a new pod template).
    before = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    _run([*helm_base, "upgrade", "gpusched-e2e", str(CHART), "--reuse-values", "--set", "config.binding.qps=70"])
    configmap = kube.request("GET", f"/api/v1/namespaces/{ns}/configmaps/gpusched-e2e-config")
    assert yaml.safe_load(configmap["data"]["gpusched.yaml"])["binding"]["qps"] == 70
    upgraded = kube.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/gpusched-e2e")
    assert upgraded["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != before
    assert upgraded["spec"]["replicas"] == 3  # the install's values kept

    _run([*helm_base, "uninstall", "gpusched-e2e"], timeout=300)
    left = [path for path in objects if _exists(kube, path)]
    assert not left, f"helm uninstall left {left}"
    # Helm never deletes CRDs: the cluster's PodGroups, Queues and Topologies outlive the release.
    assert _exists(kube, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/queues.scheduling.gpusched.io")
