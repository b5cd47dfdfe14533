"""manifests/rbac.yaml grants what ``gpusched run`` asks of the API server, and nothing else.

Two checks around one reviewed table (``tests.k8s.api_calls``):

- the code against the table: every method of kubernetes_asyncio's generated API classes that a module of
  ``scheduler/`` names (the package sends no request any other way: ``scheduler.k8s.client``) has its rows, and every
  row's method is still named there; the group, resource and verb of each row agree with the path and HTTP method the
  generated client sends; the generic custom-object rows name what the code's constants name; kopf watches exactly the
  table's resources, with the settings that keep it from needing more;
- the table against the manifests: the ClusterRole and the Role grant each right a row needs, and nothing no row needs.

A new call in the code fails the first check until it has a row; a right missing from manifests/rbac.yaml, or left
there after its call went, fails the second.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_asyncio
import pytest
import yaml

from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.objects import workloads
from scheduler.k8s import client as k8s_client
from scheduler.k8s import run, status
from scheduler.k8s.feeds import handlers
from tests.k8s import api_calls
from tests.k8s.api_calls import CALLS, Call

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = REPO / "scheduler"
MANIFESTS = REPO / "manifests"
GENERATED = Path(kubernetes_asyncio.__file__).parent / "client" / "api"

#: What the built-in ClusterRole ``system:auth-delegator`` grants (Kubernetes' bootstrap policy).
AUTH_DELEGATOR_RULES = {
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
}

#: HTTP method -> the RBAC verbs a request of it can be (a GET of a collection is a list, or a watch).
VERBS_OF = {
    ("GET", False): {"list", "watch"},
    ("GET", True): {"get"},
    ("POST", False): {"create"},
    ("POST", True): {"create"},
    ("PUT", True): {"update"},
    ("PATCH", True): {"patch"},
    ("DELETE", True): {"delete"},
    ("DELETE", False): {"deletecollection"},
}


# --- the generated client: each method's path and HTTP method -----------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    api: str
    path: str
    http: str


_CLASS = re.compile(r"^class (\w+)\(", re.MULTILINE)
_METHOD = re.compile(r"^    def (\w+)_with_http_info\(self.*?call_api\(\s*'([^']*)', '(\w+)'", re.MULTILINE | re.DOTALL)


def _endpoints() -> dict[str, list[Endpoint]]:
    """Every public request method of every generated API class -> where it sends (one name may be on many classes:
    ``get_api_resources``)."""
    found: dict[str, list[Endpoint]] = defaultdict(list)
    for source in sorted(GENERATED.glob("*_api.py")):
        text = source.read_text()
        named = _CLASS.search(text)
        if named is None:
            continue
        for method, path, http in _METHOD.findall(text):
            found[method].append(Endpoint(named.group(1), path, http))
    return dict(found)


ENDPOINTS = _endpoints()


def _rbac_of(endpoint: Endpoint) -> tuple[str, str, set[str]] | None:
    """(group, resource[/subresource], possible verbs) of a path; None for discovery (no resource). ``{group}``
    and ``{plural}`` stay placeholders: the custom-object methods take them as arguments."""
    parts = endpoint.path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if rest[:2] == ["namespaces", "{namespace}"] and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return None
    named = len(rest) > 1
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    return group, resource, VERBS_OF.get((endpoint.http, named), set())


# --- the code: which generated methods each module names ---------------------------------------------------------


def _named_methods() -> dict[tuple[str, str], list[str]]:
    """(module, method) -> where (file:line) for every generated API method a module of scheduler/ names, as an
    attribute (``client.core.list_node``) or a string."""
    named: dict[tuple[str, str], list[str]] = defaultdict(list)
    for source in sorted(SCHEDULER.rglob("*.py")):
        tree = ast.parse(source.read_text(), filename=str(source))
        # Rows name a module of scheduler/k8s/ by its stem; anywhere else, a call is named by its dotted path (and has
        # no row: only scheduler.k8s may talk to the API server, as the import-linter contracts keep it).
        inside = SCHEDULER / "k8s" in source.parents
        module = source.stem if inside else ".".join(source.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value
            else:
                continue
            if name in ENDPOINTS and name != "__init__":
                named[(module, name)].append(f"{source.relative_to(REPO)}:{node.lineno}")
    return dict(named)


def test_the_scan_finds_what_the_binder_and_an_informer_call() -> None:
    # The scan itself: a bind and an informer's list method are found where they are made.
    named = _named_methods()
    assert any(
        where.startswith("scheduler/k8s/ports/binder.py")
        for where in named[("binder", "create_namespaced_pod_binding")]
    )
    assert ("run", "list_node") in named
    assert len(ENDPOINTS) > 500  # every generated class was read


def test_every_api_call_in_the_code_is_in_the_table_and_every_row_is_in_the_code() -> None:
    named = _named_methods()
    rows = {(c.module, c.method) for c in CALLS if c.api != api_calls.KOPF}
    missing = {key: where for key, where in named.items() if key not in rows}
    assert not missing, (
        "API calls with no row in tests/k8s/api_calls.py (add one, with the right it needs, and grant it in "
        f"manifests/rbac.yaml): {missing}"
    )
    stale = sorted(rows - set(named))
    assert not stale, f"rows of tests/k8s/api_calls.py whose call is no longer in the code: {stale}"


def test_no_request_bypasses_the_generated_methods() -> None:
    # A raw ``api.call_api(path, ...)`` or a request through the ApiClient's REST client would escape the scan above.
    # The one exception is the client's DIRECT path (``scheduler.k8s.client``), reached only through a call that names
    # the generated method, and sending exactly what that method would: its verb and path are checked here.
    client_py = SCHEDULER / "k8s" / "client.py"
    raw = [
        f"{source.relative_to(REPO)}:{node.lineno}"
        for source in sorted(SCHEDULER.rglob("*.py"))
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in {"call_api", "rest_client"}
        and not (source == client_py and node.attr == "rest_client")
    ]
    assert raw == []
    for (api, method), (verb, path) in k8s_client.DIRECT.items():
        assert Endpoint(api, path, verb) in ENDPOINTS[method], (method, ENDPOINTS[method])


@pytest.mark.parametrize(
    "call", [c for c in CALLS if c.api != api_calls.KOPF and not c.checked], ids=lambda c: f"{c.module}.{c.method}"
)
def test_each_row_says_what_its_method_sends(call: Call) -> None:
    endpoints = [e for e in ENDPOINTS.get(call.method, []) if e.api == call.api]
    assert endpoints, f"{call.api} has no method {call.method}"
    target = _rbac_of(endpoints[0])
    if target is None:
        assert call.rights == api_calls.DISCOVERY and not call.resource and not call.verbs
        return
    group, resource, verbs = target
    base, _, sub = resource.partition("/")
    row_base, _, row_sub = call.resource.partition("/")
    assert group in ("{group}", call.group), endpoints[0]
    assert base in ("{plural}", "{resource_plural}", row_base), endpoints[0]
    assert sub == row_sub, endpoints[0]
    assert call.verbs and set(call.verbs) <= verbs, (endpoints[0], verbs)


def test_a_right_the_api_server_checks_belongs_to_a_call_of_the_table() -> None:
    calls = {(c.module, c.api, c.method, c.resource.partition("/")[0]) for c in CALLS if not c.checked}
    checked = [c for c in CALLS if c.checked]
    assert checked, "resourceclaims/binding is checked on DRA's status writes"
    for c in checked:
        assert (c.module, c.api, c.method, c.resource.partition("/")[0]) in calls, c


def test_the_custom_object_rows_name_what_the_code_asks_for() -> None:
    def rows(module: str, method: str) -> set[tuple[str, str]]:
        return {(c.group, c.resource) for c in CALLS if (c.module, c.method) == (module, method)}

    # The owners read on the way to a workload (scheduler.api.objects.workloads.READABLE; a Pod: read_namespaced_pod).
    owners = {(r.group, r.plural) for r in workloads.READABLE.values() if r.group}
    assert rows("grouper", "get_namespaced_custom_object") == owners
    assert {("", r.plural) for r in workloads.READABLE.values() if not r.group} == rows(
        "grouper", "read_namespaced_pod"
    )
    assert rows("grouper", "create_namespaced_custom_object") == {(api_podgroup.GROUP, api_podgroup.PLURAL)}
    # The status writers: one per custom resource of scheduler.k8s.status.
    written = [v for v in vars(status).values() if isinstance(v, status.CustomResource)]
    assert rows("status", "patch_namespaced_custom_object_status") == {
        (r.group, f"{r.plural}/status") for r in written if r.namespaced
    }
    assert rows("status", "patch_cluster_custom_object_status") == {
        (r.group, f"{r.plural}/status") for r in written if not r.namespaced
    }


def test_kopf_watches_the_tables_resources_and_needs_nothing_more() -> None:
    operator = SimpleNamespace(
        **{
            name: lambda *_, **__: None
            for name in (
                "podgroup_event",
                "queue_event",
                "topology_event",
                "reservation_event",
                "namespace_event",
                "compat_podgroup_event",
                "part_listed",
            )
        }
    )
    reg = handlers.registry(operator, k8s_client.ClientSettings(), compat=True)
    watched = {
        (h.selector.group, h.selector.any_name)
        for registry in (reg._indexing, reg._watching)
        for h in registry.get_all_handlers()
        if h.selector is not None
    }
    assert watched == {(c.group, c.resource) for c in CALLS if c.api == api_calls.KOPF}
    assert all(c.verbs == api_calls.LIST_WATCH for c in CALLS if c.api == api_calls.KOPF)
    # What would need more rights: change handlers and daemons patch the objects (progress, finalizers), posting
    # creates Events, peering reads and writes KopfPeerings, scanning lists and watches CRDs and namespaces.
    assert list(reg._changing.get_all_handlers()) == []
    assert list(reg._spawning.get_all_handlers()) == []
    settings = handlers.settings()
    assert settings.posting.enabled is False
    assert settings.scanning.disabled is True
    assert settings.peering.standalone is True


# --- the manifests -----------------------------------------------------------------------------------------------


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / "rbac.yaml").read_text()) if d]


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in _documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"manifests/rbac.yaml: {len(found)} {kind} {name}"
    return found[0]


def _granted(rules: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(group, resource, verb, name or "") for every combination the rules grant; no wildcard, no URL."""
    out = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule, rule
        names = rule.get("resourceNames") or [""]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"a wildcard grants more than any call needs: {rule}"
                    out.update((group, resource, verb, name) for name in names)
    return out


def _needed(rights: str, *, name: str = "") -> dict[tuple[str, str, str, str], list[str]]:
    """The rights the rows of ``rights`` need -> the calls that need each."""
    out: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for c in CALLS:
        if c.rights == rights:
            for verb in c.verbs:
                out[(c.group, c.resource, verb, name if c.named else "")].append(f"{c.module}.{c.method}")
    return dict(out)


def _diff(needed: Mapping[tuple[str, ...], list[str]], granted: set[tuple[str, str, str, str]]) -> str:
    missing = {k: v for k, v in needed.items() if k not in granted}
    unused = sorted(granted - set(needed))
    return f"not granted (right: calls): {missing}; granted but no call needs it: {unused}"


def test_the_cluster_role_grants_each_call_of_gpusched_run_and_nothing_more() -> None:
    needed = _needed(api_calls.CLUSTER)
    granted = _granted(_one("ClusterRole", "gpusched")["rules"])
    assert set(needed) == granted, _diff(needed, granted)


def _lease_name() -> str:
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    name = parser.get_default("lease_name")
    assert isinstance(name, str)
    return name


def test_the_leader_election_role_grants_its_lease_and_nothing_more() -> None:
    needed = _needed(api_calls.LEASE, name=_lease_name())
    granted = _granted(_one("Role", "gpusched-leader-election")["rules"])
    assert set(needed) == granted, _diff(needed, granted)


def test_the_dashboards_checks_are_what_system_auth_delegator_grants() -> None:
    needed = {(g, r, v) for g, r, v, _ in _needed(api_calls.AUTH_DELEGATOR)}
    assert needed == AUTH_DELEGATOR_RULES
    # Not in the shipped RBAC (the dashboard is off by default): docs/dashboard.md says what to bind.
    assert "system:auth-delegator" in (REPO / "docs" / "dashboard.md").read_text()
    granted = {g[:3] for doc in _documents() if doc["kind"] in ("ClusterRole", "Role") for g in _granted(doc["rules"])}
    assert not granted & AUTH_DELEGATOR_RULES


def test_the_service_account_of_the_deployment_is_the_one_bound() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    account = yaml.safe_load((MANIFESTS / "serviceaccount.yaml").read_text())
    deployment = yaml.safe_load((MANIFESTS / "deployment.yaml").read_text())
    subject = {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": kustomization["namespace"]}
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == subject["name"]
    for kind, name, role_kind, role in (
        ("ClusterRoleBinding", "gpusched", "ClusterRole", "gpusched"),
        ("RoleBinding", "gpusched-leader-election", "Role", "gpusched-leader-election"),
        # /explain's and the dashboard's access checks (AUTH_DELEGATOR rows): the built-in role, bound as shipped.
        ("ClusterRoleBinding", "gpusched-auth-delegator", "ClusterRole", "system:auth-delegator"),
    ):
        binding = _one(kind, name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}
        assert binding["subjects"] == [subject]
    kinds = sorted(d["kind"] for d in _documents())
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "Role", "RoleBinding"]
