"""What the end-to-end scenarios need to drive a cluster: API access, object builders, waits, `gpusched run`.

Two kinds of cluster stand behind :class:`Kube`: a :class:`localcluster.LocalCluster` started by the suite, or an
existing one (kind, k3d) named by ``GPUSCHED_E2E_KUBECONFIG``. Calls are plain synchronous JSON over HTTPS (no
client library between the test and what the API server says), so a failure message shows the server's answer.

:class:`Gpusched` runs ``gpusched run`` as a subprocess per the command's contract (health server with
``/healthz``, ``/readyz``, ``/leader``; metrics; JSON logs) so that tests can kill it with SIGKILL, restart it and
run two replicas.

Builders (:func:`pod`, :func:`podgroup`, :func:`queue`, :func:`gpu_node`) return manifests; the
:class:`Scenario` creates them in its own namespace and deletes everything it made when the test ends, so that
one cluster serves the whole session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.localcluster import (
    GPU_RESOURCE,
    KWOK_NODE_ANNOTATION,
    APIError,
    ClusterError,
    LocalCluster,
    free_port,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CRDS = REPO / "crds"
MANIFESTS = REPO / "manifests"
GROUP = "scheduling.gpusched.io"
VERSION = "v1alpha1"
SCHEDULER_NAME = "gpusched"
SYSTEM_NAMESPACE = "gpusched-system"
#: The ServiceAccount manifests/ ships, and the one Lease its Role lets it get and update (by name).
SERVICE_ACCOUNT = "gpusched"
SHIPPED_LEASE = "gpusched"
#: What of manifests/ gives the ServiceAccount its rights (the Deployment and its Service need an image: not applied).
SHIPPED_RBAC_KINDS = frozenset(
    {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "CustomResourceDefinition",
    }
)
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
#: The binding docs/dashboard.md has an operator make for ``--dashboard-auth=kubernetes``.
AUTH_DELEGATOR_BINDING = "gpusched-auth-delegator"
#: Unset (the default) or ``1``: every scenario's ``gpusched run`` runs as shipped, with the ServiceAccount's token and
#: the RBAC of manifests/ (:meth:`Scenario.gpusched`); ``0`` (or ``false``, ``no``): with the suite's admin kubeconfig,
#: to tell a scheduling bug from a missing right while debugging.
AS_SERVICE_ACCOUNT_ENV = "GPUSCHED_E2E_AS_SERVICE_ACCOUNT"
#: A log line of gpusched that says the API server refused one of its requests for want of a right: the authorizer's
#: message (``pods is forbidden: User "system:serviceaccount:..." cannot list resource "pods" ...``), not another 403
#: (an Event refused because its namespace is being deleted says "forbidden: unable to create new content").
REFUSED = re.compile(r"is forbidden: User .{1,300}? cannot ")
#: What the authorizer's message names of a refused request: the object (``resource[.group]``, its name), who, the
#: verb, and the resource as authorized (with a subresource: ``podgroups/status``), its group and namespace (none:
#: cluster scope), or a non-resource path. Read with the log line's quotes unescaped (JSON, or an API server's JSON
#: answer inside JSON); an informer's line may cut the message short after the verb.
REFUSED_REQUEST = re.compile(
    r'(?:(?P<object>[a-z0-9.-]+)(?: "(?P<name>[^"]*)")? is )?forbidden: User "(?P<user>[^"]+)" cannot (?P<verb>[a-z]+)'
    r'(?: resource "(?P<resource>[^"]+)" in API group "(?P<group>[a-z0-9.-]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]+)")?'
    r'| path "(?P<path>[^"]+)")?'
)


def refused_request(line: str) -> dict[str, str] | None:
    """The request a log line's refusal names, as a SubjectAccessReview's spec (``user``, ``groups`` of a
    ServiceAccount's token, and ``resourceAttributes`` or ``nonResourceAttributes``), or None if the line does not
    say enough. A message cut short after the verb is read from its object: that resource at cluster scope."""
    found = REFUSED_REQUEST.search(re.sub(r'\\+"', '"', line))
    if found is None:
        return None
    user = found["user"]
    spec: dict[str, Any] = {"user": user, "groups": ["system:authenticated"]}
    if user.startswith("system:serviceaccount:"):
        spec["groups"] += ["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"]
    if found["path"]:
        spec["nonResourceAttributes"] = {"path": found["path"], "verb": found["verb"]}
        return spec
    if found["resource"] is not None:
        (resource, _, subresource), group = found["resource"].partition("/"), found["group"]
    elif found["object"]:
        (resource, _, group), subresource = found["object"].partition("."), ""
    else:
        return None
    spec["resourceAttributes"] = {
        "verb": found["verb"],
        "group": group,
        "resource": resource,
        "subresource": subresource,
        "namespace": found["namespace"] or "",
        "name": found["name"] or "",  # a Role may grant one object by name (the Lease)
    }
    return spec


#: Every object a scenario creates carries this label with the scenario's name, so leftovers can be found.
OWNER_LABEL = "e2e.gpusched.io/scenario"

LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_RACK = "network.topology.gpusched.io/rack"
LABEL_BLOCK = "network.topology.gpusched.io/block"
ANNOTATION_GPU_TOPOLOGY = "gpusched.io/gpu-topology"
ANNOTATION_GPU_IDS = "gpusched.io/gpu-ids"
ANNOTATION_GPU_MILLI = "gpusched.io/gpu-milli"
ANNOTATION_GPU_MEMORY = "gpusched.io/gpu-memory"
ANNOTATION_GPU_MODEL = "gpusched.io/gpu-model"
LABEL_POD_GROUP = "gpusched.io/pod-group"
LABEL_QUEUE = "gpusched.io/queue"


class WaitTimeout(AssertionError):
    """A condition did not come true in time; the message says what was awaited and what was last seen."""


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    describe: Callable[[], str] | None = None,
    interval: float = 0.2,
) -> Any:
    """Poll ``predicate`` until it returns something truthy and return it.

    What waiting can clear is waited out: an object not there yet (the API server's 404), and an API server or a
    ``gpusched run`` briefly out of reach (429, 5xx, a refused or timed-out connection: the fault tests restart
    them). Any other exception is the predicate's own (a KeyError on an answer it misread, a typo, a wrong
    request) and is raised at once, not after the timeout. On timeout raise :class:`WaitTimeout` naming ``what``,
    with ``describe()`` (the state the test cares about) and the last exception waited out, so that the failure
    reads as a bug report.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:
            if not _passing(exc):
                raise
            last_exc = exc
        if time.monotonic() >= deadline:
            parts = [f"timed out after {timeout:.0f}s waiting for {what}"]
            if describe is not None:
                try:
                    parts.append(f"state: {describe()}")
                except Exception as exc:
                    parts.append(f"(could not describe the state: {exc!r})")
            if last_exc is not None:
                parts.append(f"last error: {last_exc!r}")
            raise WaitTimeout("; ".join(parts))
        time.sleep(interval)
        interval = min(interval * 1.3, 1.0)


def _passing(exc: BaseException) -> bool:
    """Whether waiting may clear ``exc`` (see :func:`wait_until`)."""
    if isinstance(exc, APIError):
        return exc.status in (404, 429) or exc.status >= 500
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in (404, 429) or exc.code >= 500
    return isinstance(exc, (urllib.error.URLError, ConnectionError, TimeoutError))


# --------------------------------------------------------------------------------------------------------------
# API access


class Kube:
    """JSON over HTTPS to one API server, plus kubectl, for a local or an existing cluster."""

    def __init__(
        self,
        *,
        server: str,
        ssl_context: ssl.SSLContext,
        kubeconfig: Path,
        kubectl: str,
        token: str | None = None,
        local: LocalCluster | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context
        self.kubeconfig = kubeconfig
        self.kubectl_path = kubectl
        self.token = token
        #: The LocalCluster when the suite started one (API server restarts need it), else None.
        self.local = local
        #: Whether :meth:`apply_shipped_rbac` has run on this cluster.
        self.shipped_rbac = False

    @classmethod
    def of_local(cls, cluster: LocalCluster) -> Kube:
        return cls(
            server=cluster.server,
            ssl_context=cluster.ssl_context(),
            kubeconfig=cluster.kubeconfig,
            kubectl=str(cluster.kubectl_path),
            local=cluster,
        )

    @classmethod
    def of_kubeconfig(cls, kubeconfig: str, *, context: str | None = None) -> Kube:
        """An existing cluster: the kubeconfig is read by kubernetes_asyncio (certs, tokens, exec plugins)."""
        from kubernetes_asyncio import client as k8s_client
        from kubernetes_asyncio import config as k8s_config

        async def load() -> Any:
            conf = k8s_client.Configuration()
            await k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=conf)
            return conf

        conf = asyncio.run(load())
        ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert) if conf.ssl_ca_cert else ssl.create_default_context()
        if not conf.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if conf.cert_file:
            ctx.load_cert_chain(conf.cert_file, conf.key_file)
        auth = (conf.api_key or {}).get("authorization") or (conf.api_key or {}).get("BearerToken")
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise ClusterError("GPUSCHED_E2E_KUBECONFIG is set but kubectl is not on PATH")
        return cls(server=conf.host, ssl_context=ctx, kubeconfig=Path(kubeconfig), kubectl=kubectl, token=auth)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Any:
        """One call; the parsed JSON answer. Raises :class:`localcluster.APIError` on a non-2xx answer."""
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = self.token if " " in self.token else f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context) as resp:
                raw = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            raise APIError(method, path, exc.code, exc.read().decode("utf-8", "replace")) from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def apply_crds(self) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
        paths = sorted(CRDS.glob("*.yaml"))
        for path in paths:
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            self.kubectl("wait", "--for=condition=established", "--timeout=60s", f"crd/{name}")
        self.warm_lists(paths)

    def warm_lists(self, crd_files: Iterable[Path], timeout: float = 60.0) -> None:
        """List every custom resource type of ``crd_files`` until the API server answers.

        An API server builds the storage of a custom resource type, and its watch cache, at the first request
        for it; until the cache has listed etcd it answers ``429 storage is (re)initializing`` with a Retry-After
        of one second. In a running cluster that happened long ago; on the fresh control plane of a test or a
        benchmark it would happen to whichever client asks first, so the types are asked for here, before any
        scheduler starts (``established`` on the CRD does not cover it)."""
        deadline = time.monotonic() + timeout
        for path in crd_files:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                versions = [v["name"] for v in spec.get("versions", []) if v.get("served", True)]
                for version in versions[:1]:
                    url = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
                    while True:
                        try:
                            self.request("GET", url, query={"limit": "1"})
                            break
                        except APIError as exc:
                            if exc.status != 429 or time.monotonic() > deadline:
                                raise
                            time.sleep(0.1)

    def apply_shipped_rbac(self, *, kinds: frozenset[str] = SHIPPED_RBAC_KINDS) -> list[str]:
        """Apply what manifests/ ships for the scheduler's rights, as ``kubectl apply -k manifests/`` would make it
        (rendered by ``kubectl kustomize``, so the Role and the ServiceAccount land in the kustomization's namespace):
        the namespace, the ServiceAccount, the ClusterRole and the Role with their bindings, the CRDs (of these
        ``kinds``). Returns the objects applied (``Kind/name``)."""
        rendered = self.kubectl("kustomize", str(MANIFESTS)).stdout
        docs = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in kinds]
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))
        self.shipped_rbac = True
        return [f"{d['kind']}/{d['metadata']['name']}" for d in docs]

    def service_account_kubeconfig(
        self, path: Path, *, namespace: str = SYSTEM_NAMESPACE, name: str = SERVICE_ACCOUNT, seconds: int = 3600
    ) -> Path:
        """Write at ``path`` a kubeconfig for the ServiceAccount ``namespace/name``: this cluster's server and CA
        (from the suite's kubeconfig) and a token of the TokenRequest API, as a pod of that ServiceAccount would get
        mounted; no other credential. Returns ``path``."""
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        token = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", review)["status"][
            "token"
        ]
        view = json.loads(self.kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json").stdout)
        user = f"system:serviceaccount:{namespace}:{name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": view["clusters"][0]["cluster"]}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "e2e", "user": user, "namespace": namespace}}],
            "current-context": name,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def allowed(self, spec: Mapping[str, Any]) -> bool:
        """Whether the authorizer allows now what a SubjectAccessReview's ``spec`` asks (:func:`refused_request`)."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": dict(spec)}
        answer = self.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(answer.get("status", {}).get("allowed"))

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
        try:
            self.request("POST", "/api/v1/namespaces", body)
        except APIError as exc:
            if exc.status != 409:
                raise

    # ---- paths ----

    @staticmethod
    def pods_path(namespace: str, name: str = "") -> str:
        return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")

    @staticmethod
    def custom_path(plural: str, namespace: str | None = None, name: str = "") -> str:
        base = f"/apis/{GROUP}/{VERSION}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        return f"{base}/{plural}" + (f"/{name}" if name else "")

    # ---- reads ----

    def pods(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        items: list[dict[str, Any]] = self.request("GET", self.pods_path(namespace), query=query)["items"]
        return items

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.request("GET", self.pods_path(namespace, name))
        return got

    def events(self, namespace: str, *, name: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        selectors = []
        if name:
            selectors.append(f"involvedObject.name={name}")
        if kind:
            selectors.append(f"involvedObject.kind={kind}")
        query = {"fieldSelector": ",".join(selectors)} if selectors else None
        items: list[dict[str, Any]] = self.request("GET", f"/api/v1/namespaces/{namespace}/events", query=query)[
            "items"
        ]
        return items

    def nodes(self, selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        items: list[dict[str, Any]] = self.request("GET", "/api/v1/nodes", query=query)["items"]
        return items


# --------------------------------------------------------------------------------------------------------------
# manifests


def gpu_topology_annotation(gpus: int, *, nvlink_groups: int = 1) -> str:
    """A ``gpusched.io/gpu-topology`` value (docs/topology.md): ``nvlink_groups`` NVLink islands, one per NUMA node.

    With 8 GPUs and 2 groups: GPUs 0-3 all joined by NVLink on NUMA 0 under one PCIe switch, 4-7 likewise on NUMA 1.
    """
    per_group = max(1, gpus // nvlink_groups)
    entries = []
    for index in range(gpus):
        group = min(index // per_group, nvlink_groups - 1)
        peers = [p for p in range(gpus) if p != index and min(p // per_group, nvlink_groups - 1) == group]
        entry: dict[str, Any] = {"index": index, "numa": group, "pcie": f"pcie{group}"}
        if peers:
            entry["nvlink"] = {str(p): 12 for p in peers}
        entries.append(entry)
    return json.dumps({"version": 1, "gpus": entries}, separators=(",", ":"))


def gpu_node(
    name: str,
    *,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
    product: str = "NVIDIA-H100-80GB-HBM3",
    gpu_memory_mib: int = 81559,
    clique: str | None = None,
    rack: str | None = None,
    block: str | None = None,
    nvlink_groups: int = 1,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A kwok-managed GPU node: capacity, the GPU feature-discovery labels, topology labels and annotation."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
    }
    annotations = {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if gpus:
        capacity[GPU_RESOURCE] = str(gpus)
        node_labels[LABEL_GPU_PRODUCT] = product
        node_labels[LABEL_GPU_MEMORY] = str(gpu_memory_mib)
        annotations[ANNOTATION_GPU_TOPOLOGY] = gpu_topology_annotation(gpus, nvlink_groups=nvlink_groups)
    for key, value in ((LABEL_CLIQUE, clique), (LABEL_RACK, rack), (LABEL_BLOCK, block)):
        if value is not None:
            node_labels[key] = value
    node_labels.update(labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": annotations},
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def pod(
    name: str,
    *,
    gpus: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    gpu_milli: int | None = None,
    gpu_memory: str | None = None,
    gpu_model: str | None = None,
    group: str | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler_name: str = SCHEDULER_NAME,
) -> dict[str, Any]:
    """A pod for gpusched: whole GPUs (``gpus``), a shared GPU (``gpu_milli``, ``gpu_memory``) or none."""
    pod_labels = dict(labels or {})
    annotations: dict[str, str] = {}
    if group:
        pod_labels[LABEL_POD_GROUP] = group
    if queue:
        pod_labels[LABEL_QUEUE] = queue
    if gpu_milli is not None:
        annotations[ANNOTATION_GPU_MILLI] = str(gpu_milli)
    if gpu_memory is not None:
        annotations[ANNOTATION_GPU_MEMORY] = gpu_memory
    if gpu_model is not None:
        annotations[ANNOTATION_GPU_MODEL] = gpu_model
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/train:latest",
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": pod_labels, "annotations": annotations},
        "spec": spec,
    }


def podgroup(
    name: str,
    *,
    min_member: int,
    queue: str | None = None,
    topology_required: str | None = None,
    topology_preferred: str | None = None,
    schedule_timeout_seconds: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if queue:
        spec["queue"] = queue
    topology = {}
    if topology_required:
        topology["required"] = topology_required
    if topology_preferred:
        topology["preferred"] = topology_preferred
    if topology:
        spec["topology"] = topology
    if schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = schedule_timeout_seconds
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def queue(
    name: str,
    *,
    parent: str | None = None,
    weight: float | None = None,
    guaranteed: Mapping[str, str] | None = None,
    limit: Mapping[str, str] | None = None,
    borrowing: Mapping[str, Any] | None = None,
    reclaim: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parent"] = parent
    if weight is not None:
        spec["weight"] = weight
    if guaranteed:
        spec["guaranteed"] = dict(guaranteed)
    if limit:
        spec["limit"] = dict(limit)
    if borrowing is not None:
        spec["borrowing"] = dict(borrowing)
    if reclaim:
        spec["preemption"] = {"reclaim": reclaim}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


# --------------------------------------------------------------------------------------------------------------
# reading pods


def node_of(p: Mapping[str, Any]) -> str:
    return str(p.get("spec", {}).get("nodeName") or "")


def phase_of(p: Mapping[str, Any]) -> str:
    return str(p.get("status", {}).get("phase") or "")


def gpu_ids_of(p: Mapping[str, Any]) -> tuple[int, ...]:
    raw = (p.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_GPU_IDS, "")
    return tuple(int(x) for x in raw.split(",")) if raw.strip() else ()


def condition(p: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in p.get("status", {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def whole_gpus_of(p: Mapping[str, Any]) -> int:
    total = 0
    for c in p.get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        total += int((res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0)
    return total


def summary(pods: Iterable[Mapping[str, Any]]) -> str:
    """One line per pod: name, node, phase, GPU ids: what a failure message should show."""
    lines = []
    for p in pods:
        ids = ",".join(map(str, gpu_ids_of(p)))
        lines.append(f"{p['metadata']['name']}@{node_of(p) or '-'}[{phase_of(p)}]{('gpus=' + ids) if ids else ''}")
    return "; ".join(lines) if lines else "(no pods)"


def check_no_overcommit(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]) -> None:
    """Assert what a user would call a double booking: whole GPUs per node above capacity, or one GPU id twice."""
    capacity = {n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU_RESOURCE, 0)) for n in nodes}
    used: dict[str, int] = {}
    ids: dict[str, list[int]] = {}
    for p in pods:
        node = node_of(p)
        if not node or phase_of(p) in ("Succeeded", "Failed") or p["metadata"].get("deletionTimestamp"):
            continue
        gpus = whole_gpus_of(p)
        used[node] = used.get(node, 0) + gpus
        if gpus:
            ids.setdefault(node, []).extend(gpu_ids_of(p))
    over = {n: (u, capacity.get(n, 0)) for n, u in used.items() if u > capacity.get(n, 0)}
    assert not over, f"nodes over-committed (used, capacity): {over}"
    for node, taken in ids.items():
        assert len(taken) == len(set(taken)), f"node {node}: a GPU id given to two pods: {sorted(taken)}"


# --------------------------------------------------------------------------------------------------------------
# gpusched run


def gpusched_command() -> list[str]:
    """How to run the gpusched command of this checkout (the virtualenv's script, else ``-m scheduler.cli``)."""
    script = Path(sys.executable).parent / "gpusched"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "scheduler.cli"]


def gpusched_run_available() -> str | None:
    """None if ``gpusched run`` exists in this checkout, else why not (the command's own message)."""
    proc = subprocess.run([*gpusched_command(), "run", "--help"], capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        return None
    return (proc.stderr or proc.stdout).strip().splitlines()[-1] if (proc.stderr or proc.stdout).strip() else "?"


class Gpusched:
    """One ``gpusched run`` replica as a subprocess: start, wait ready, SIGKILL, restart, read its health and logs."""

    def __init__(
        self,
        kube: Kube,
        *,
        identity: str,
        workdir: Path,
        config: Mapping[str, Any] | None = None,
        lease_name: str = "gpusched",
        extra_args: Sequence[str] = (),
        kubeconfig: Path | None = None,
    ) -> None:
        """``kubeconfig``: the credentials it runs with (:meth:`Kube.service_account_kubeconfig`); None: the suite's
        own (cluster-admin)."""
        self.kube = kube
        self.kubeconfig = kubeconfig if kubeconfig is not None else kube.kubeconfig
        self.identity = identity
        self.config_path = workdir / f"{identity}.yaml"
        self.config_path.write_text(yaml.safe_dump(dict(config or {})))
        self.log_path = workdir / f"{identity}.log"
        self.lease_name = lease_name
        self.extra_args = list(extra_args)
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def argv(self) -> list[str]:
        return [
            *gpusched_command(),
            "run",
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.config_path}",
            f"--namespace={SYSTEM_NAMESPACE}",
            f"--lease-name={self.lease_name}",
            f"--identity={self.identity}",
            f"--health-port={self.health_port}",
            f"--metrics-port={self.metrics_port}",
            "--log-format=json",
            *self.extra_args,
        ]

    @property
    def as_service_account(self) -> bool:
        """Whether it runs with other credentials than the suite's admin ones (the shipped ServiceAccount's)."""
        return self.kubeconfig != self.kube.kubeconfig

    def start(self) -> Gpusched:
        if self.alive():
            raise ClusterError(f"gpusched {self.identity} is already running")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if self.kube.local is not None:
            self.kube.local.track_process(self.popen.pid)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def _get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status, resp.read().decode().strip()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode().strip()

    def _check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ClusterError(f"gpusched {self.identity} exited with code {self.popen.returncode}:\n{self.log_tail()}")

    def ready(self) -> bool:
        self._check_alive()
        return self._get("/readyz")[0] == 200

    def is_leader(self) -> bool:
        self._check_alive()
        status, body = self._get("/leader")
        return status == 200 and body == "leader"

    def wait_ready(self, timeout: float = 90.0) -> Gpusched:
        try:
            wait_until(self.ready, timeout=timeout, what=f"gpusched {self.identity} /readyz 200")
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\nlog tail:\n{self.log_tail()}") from None
        return self

    def wait_leader(self, timeout: float = 60.0) -> Gpusched:
        try:
            wait_until(self.is_leader, timeout=timeout, what=f"gpusched {self.identity} to lead")
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\nlog tail:\n{self.log_tail()}") from None
        return self

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would."""
        self.stop(kill=True)

    def stop(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        p = self.popen
        if p is None:
            return
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        if self.kube.local is not None:
            self.kube.local.untrack_process(p.pid)

    def restart(self) -> Gpusched:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"<no log: {exc}>"

    def refusals(self) -> list[str]:
        """The lines of its log that say the API server refused a request of it for want of a right (403 Forbidden)
        that it still lacks. A refusal of a request the authorizer allows when asked now
        (:meth:`Kube.allowed`) is left out: an API server just restarted (the fault test) refuses everything for a
        moment, until its RBAC informers have listed the roles ("RBAC: [clusterrole ... not found"), and that is
        no right missing from manifests/."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        asked: dict[str, bool] = {}
        missing = []
        for line in text.splitlines():
            if not REFUSED.search(line):
                continue
            spec = refused_request(line)
            if spec is None:
                missing.append(line)  # a refusal this cannot read: kept, to be looked at
                continue
            key = json.dumps(spec, sort_keys=True)
            if key not in asked:
                asked[key] = self.kube.allowed(spec)
            if not asked[key]:
                missing.append(line)
        return missing


# --------------------------------------------------------------------------------------------------------------
# a scenario: its own namespace, nodes, queues and schedulers, all removed at the end


@dataclass
class Scenario:
    """What one test made, so that the next test starts from an empty cluster."""

    kube: Kube
    name: str
    namespace: str
    workdir: Path
    nodes: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    schedulers: list[Gpusched] = field(default_factory=list)
    #: ClusterRoles (and their ClusterRoleBindings, of the same name) made for ServiceAccounts of this scenario.
    cluster_roles: list[str] = field(default_factory=list)
    #: Whether a replica of this scenario ran as the shipped ServiceAccount (its Lease is freed at the end).
    shipped_lease: bool = False
    #: Whether the shipped ServiceAccount was bound to ``system:auth-delegator`` (unbound at the end).
    auth_delegator: bool = False

    # ---- creating ----

    def add_node(self, manifest: Mapping[str, Any], *, wait_ready: bool = True) -> dict[str, Any]:
        body = json.loads(json.dumps(manifest))
        body["metadata"].setdefault("labels", {})[OWNER_LABEL] = self.name
        created: dict[str, Any] = self.kube.request("POST", "/api/v1/nodes", body)
        self.nodes.append(body["metadata"]["name"])
        if wait_ready:
            return self.wait_node_ready(body["metadata"]["name"])
        return created

    def add_nodes(self, manifests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        names = [self.add_node(m, wait_ready=False)["metadata"]["name"] for m in manifests]
        return [self.wait_node_ready(n) for n in names]

    def wait_node_ready(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            n: dict[str, Any] = self.kube.request("GET", f"/api/v1/nodes/{name}")
            ok = any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
            return n if ok else None

        got: dict[str, Any] = wait_until(ready, timeout=timeout, what=f"node {name} Ready (is kwok running?)")
        return got

    def create_pod(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        body = json.loads(json.dumps(manifest))
        body["metadata"].setdefault("labels", {})[OWNER_LABEL] = self.name
        created: dict[str, Any] = self.kube.request("POST", Kube.pods_path(self.namespace), body)
        return created

    def create_podgroup(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.kube.request("POST", Kube.custom_path("podgroups", self.namespace), manifest)
        return created

    def create_queue(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        body = json.loads(json.dumps(manifest))
        body["metadata"].setdefault("labels", {})[OWNER_LABEL] = self.name
        created: dict[str, Any] = self.kube.request("POST", Kube.custom_path("queues"), body)
        self.queues.append(body["metadata"]["name"])
        return created

    def account_kubeconfig(
        self,
        account: str,
        *,
        rules: Sequence[Mapping[str, Any]] = (),
        cluster_rules: Sequence[Mapping[str, Any]] = (),
    ) -> Path:
        """A kubeconfig whose user is a new ServiceAccount ``account`` of the scenario's namespace, by its token
        (a TokenRequest), with ``rules`` in the namespace (a Role) and ``cluster_rules`` everywhere (a ClusterRole,
        removed at cleanup); no rule: a user the API server knows and that may do nothing."""
        ns = self.namespace
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        self.kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": account}})
        subjects = [{"kind": "ServiceAccount", "name": account, "namespace": ns}]
        if rules:
            self.kube.request("POST", f"{rbac}/namespaces/{ns}/roles", {"metadata": {"name": account}, "rules": rules})
            self.kube.request(
                "POST",
                f"{rbac}/namespaces/{ns}/rolebindings",
                {
                    "metadata": {"name": account},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                    "subjects": subjects,
                },
            )
        if cluster_rules:
            name = f"{ns}-{account}"
            self.cluster_roles.append(name)
            self.kube.request("POST", f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": cluster_rules})
            self.kube.request(
                "POST",
                f"{rbac}/clusterrolebindings",
                {
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": subjects,
                },
            )
        token = self.kube.request(
            "POST",
            f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )["status"]["token"]
        admin = yaml.safe_load(self.kube.kubeconfig.read_text())
        context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
        cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
        path = self.workdir / f"{account}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "users": [{"name": account, "user": {"token": token}}],
                    "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account}}],
                    "current-context": account,
                }
            )
        )
        return path

    def delete_pod(self, name: str) -> None:
        with contextlib.suppress(APIError):
            self.kube.request("DELETE", Kube.pods_path(self.namespace, name), query={"gracePeriodSeconds": "0"})

    def gpusched(
        self,
        identity: str = "gpusched-0",
        *,
        config: Mapping[str, Any] | None = None,
        as_service_account: bool | None = None,
    ) -> Gpusched:
        """A replica of ``gpusched run`` (not started) that is stopped when the scenario ends.

        ``as_service_account``: it runs as manifests/ ships it, with the ServiceAccount's token and rights (applied
        here, see :meth:`Kube.apply_shipped_rbac`) and the one Lease its Role names; else with the suite's admin
        kubeconfig and a Lease of the scenario's own. None: as ``GPUSCHED_E2E_AS_SERVICE_ACCOUNT`` says (default: the
        ServiceAccount, as it runs in a cluster)."""
        if as_service_account is None:
            as_service_account = os.environ.get(AS_SERVICE_ACCOUNT_ENV, "1").lower() not in ("0", "false", "no")
        full = f"{self.name}-{identity}"
        if not as_service_account:
            # A Lease of its own: a replica killed by the previous scenario would otherwise hold it for a lease term.
            replica = Gpusched(
                self.kube,
                identity=full,
                workdir=self.workdir,
                config=config,
                lease_name=f"gpusched-{self.name}"[:63].rstrip("-"),
            )
        else:
            if not self.kube.shipped_rbac:
                self.kube.apply_shipped_rbac()
            if not self.shipped_lease:
                self.free_shipped_lease()  # a replica of an earlier run may have been killed holding it
                self.shipped_lease = True
            kubeconfig = self.kube.service_account_kubeconfig(self.workdir / f"{full}.kubeconfig")
            replica = Gpusched(
                self.kube,
                identity=full,
                workdir=self.workdir,
                config=config,
                lease_name=SHIPPED_LEASE,
                kubeconfig=kubeconfig,
            )
        self.schedulers.append(replica)
        return replica

    def start_gpusched(
        self,
        identity: str = "gpusched-0",
        *,
        config: Mapping[str, Any] | None = None,
        as_service_account: bool | None = None,
    ) -> Gpusched:
        """Start one replica and wait until it is ready and leads."""
        replica = self.gpusched(identity, config=config, as_service_account=as_service_account)
        return replica.start().wait_ready().wait_leader()

    def bind_auth_delegator(self) -> None:
        """Bind the shipped ServiceAccount to ``system:auth-delegator`` until the scenario ends, as docs/dashboard.md
        tells an operator to for ``--dashboard-auth=kubernetes`` (TokenReviews and SubjectAccessReviews)."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": AUTH_DELEGATOR_BINDING},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:auth-delegator",
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SYSTEM_NAMESPACE}],
        }
        try:
            self.kube.request("POST", f"{RBAC_API}/clusterrolebindings", binding)
        except APIError as exc:
            if exc.status != 409:  # 409: the shipped manifests' binding (manifests/rbac.yaml) is there already
                raise
        else:
            self.auth_delegator = True  # made here: deleted when the scenario ends

    def free_shipped_lease(self) -> None:
        """Delete the shipped Lease (as admin), so that the next replica takes it at once."""
        with contextlib.suppress(APIError):
            self.kube.request(
                "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases/{SHIPPED_LEASE}"
            )

    # ---- reading ----

    def pods(self, selector: str | None = None) -> list[dict[str, Any]]:
        return self.kube.pods(self.namespace, selector)

    def pod(self, name: str) -> dict[str, Any]:
        return self.kube.pod(self.namespace, name)

    def my_nodes(self) -> list[dict[str, Any]]:
        return self.kube.nodes(f"{OWNER_LABEL}={self.name}")

    def describe(self) -> str:
        """The state a failure message should show: every pod, and the tail of each scheduler's log."""
        text = summary(self.pods())
        for replica in self.schedulers:
            text += f"\n--- {replica.identity} log tail ---\n{replica.log_tail(15)}"
        return text

    def wait_bound(self, names: Iterable[str], *, timeout: float = 60.0, running: bool = True) -> list[dict[str, Any]]:
        """Wait until every named pod is on a node (and Running when ``running``); return them."""
        wanted = set(names)

        def done() -> list[dict[str, Any]] | None:
            pods = {p["metadata"]["name"]: p for p in self.pods() if p["metadata"]["name"] in wanted}
            if len(pods) != len(wanted):
                return None
            ok = all(node_of(p) and (not running or phase_of(p) == "Running") for p in pods.values())
            return list(pods.values()) if ok else None

        what = f"{len(wanted)} pods {'Running' if running else 'bound'}"
        got: list[dict[str, Any]] = wait_until(done, timeout=timeout, what=what, describe=self.describe)
        return got

    def wait_event(
        self, obj_name: str, reason: str, *, timeout: float = 60.0, kind: str | None = None
    ) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for e in self.kube.events(self.namespace, name=obj_name, kind=kind):
                if e.get("reason") == reason:
                    return e
            return None

        def describe() -> str:
            seen = [(e.get("reason"), e.get("message")) for e in self.kube.events(self.namespace, name=obj_name)]
            return f"events of {obj_name}: {seen}\n{self.describe()}"

        got: dict[str, Any] = wait_until(
            found, timeout=timeout, what=f"event {reason} on {obj_name}", describe=describe
        )
        return got

    def stays_unbound(self, names: Iterable[str], seconds: float) -> None:
        """Assert that none of the named pods gets a node for ``seconds``."""
        wanted = set(names)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            bound = [p for p in self.pods() if p["metadata"]["name"] in wanted and node_of(p)]
            assert not bound, f"expected {sorted(wanted)} to stay pending, but {summary(bound)}"
            time.sleep(0.5)

    # ---- teardown ----

    def cleanup(self) -> None:
        """Stop the schedulers, delete the namespace's pods at once, the namespace, the nodes and the queues."""
        for replica in self.schedulers:
            replica.stop(kill=True)
        refused = {r.identity: r.refusals() for r in self.schedulers if r.as_service_account}
        if self.shipped_lease:
            self.free_shipped_lease()
        if self.auth_delegator:
            with contextlib.suppress(APIError):
                self.kube.request("DELETE", f"{RBAC_API}/clusterrolebindings/{AUTH_DELEGATOR_BINDING}")
        with contextlib.suppress(APIError):
            self.kube.request("DELETE", Kube.pods_path(self.namespace), query={"gracePeriodSeconds": "0"}, timeout=60)
        with contextlib.suppress(APIError):
            self.kube.request("DELETE", f"/api/v1/namespaces/{self.namespace}")
        for name in self.queues:
            with contextlib.suppress(APIError):
                self.kube.request("DELETE", Kube.custom_path("queues", name=name))
        for name in self.nodes:
            with contextlib.suppress(APIError):
                self.kube.request("DELETE", f"/api/v1/nodes/{name}")
        for name in self.cluster_roles:
            for kind in ("clusterrolebindings", "clusterroles"):
                with contextlib.suppress(APIError):
                    self.kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/{kind}/{name}")

        def pods_gone() -> bool:
            return not self.kube.pods(self.namespace)

        with contextlib.suppress(WaitTimeout):
            wait_until(pods_gone, timeout=30, what=f"pods of {self.namespace} deleted")
        # A replica run as the shipped ServiceAccount was refused a request: a right manifests/rbac.yaml lacks.
        refused = {identity: lines for identity, lines in refused.items() if lines}
        if refused:
            raise AssertionError(f"the API server refused requests of gpusched run as its ServiceAccount: {refused}")


def scenario_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="gpusched-e2e-run-"))


# --------------------------------------------------------------------------------------------------------------
# watching pods over a run (the fault test): every node and GPU ids each pod UID was ever seen with


class PodWatcher:
    """A background watch of one namespace's pods that records, per pod UID, every ``spec.nodeName`` and every
    ``gpusched.io/gpu-ids`` value it was seen with, so a test can tell a pod bound twice from the history, not
    only from the final state.

    The watch is re-opened (after a fresh list, from its resourceVersion) whenever it breaks: an API server
    restart, a 410 Gone, a timeout. ``reconnects`` counts those; ``errors`` keeps the last few failures.
    """

    def __init__(self, kube: Kube, namespace: str) -> None:
        import threading

        self.kube = kube
        self.namespace = namespace
        self.history: dict[str, dict[str, Any]] = {}
        self.events_seen = 0
        self.reconnects = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{namespace}", daemon=True)

    def start(self) -> PodWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=70)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {
                uid: {k: (set(v) if isinstance(v, set) else v) for k, v in h.items()} for uid, h in self.history.items()
            }

    def _record(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        node = node_of(pod)
        ids = str((meta.get("annotations") or {}).get(ANNOTATION_GPU_IDS) or "")
        with self._lock:
            h = self.history.setdefault(
                uid, {"name": f"{meta.get('namespace')}/{meta.get('name')}", "nodes": set(), "gpu_ids": set()}
            )
            if node:
                h["nodes"].add(node)
                if ids:
                    h["gpu_ids"].add(ids)

    def _run(self) -> None:
        path = Kube.pods_path(self.namespace)
        while not self._stop.is_set():
            try:
                listed = self.kube.request("GET", path, timeout=30)
                for p in listed.get("items") or []:
                    self._event("ADDED", p)
                self._watch(path, str(listed["metadata"]["resourceVersion"]))
            except Exception as exc:  # the API server is away or restarting: list again shortly
                self.errors = [*self.errors[-9:], repr(exc)[:200]]
                self._stop.wait(0.5)
            self.reconnects += 1

    def _watch(self, path: str, resource_version: str) -> None:
        query = urllib.parse.urlencode({"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": "60"})
        headers = {"Accept": "application/json"}
        if self.kube.token:
            headers["Authorization"] = self.kube.token if " " in self.kube.token else f"Bearer {self.kube.token}"
        req = urllib.request.Request(f"{self.kube.server}{path}?{query}", headers=headers)
        with urllib.request.urlopen(req, timeout=90, context=self.kube.ssl_context) as resp:
            for raw in resp:
                if self._stop.is_set():
                    return
                event = json.loads(raw)
                if event.get("type") == "ERROR":
                    return  # 410 Gone and the like: list again
                self.events_seen += 1
                self._event(str(event.get("type")), event.get("object") or {})

    def _event(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A pod as the listing (``ADDED``) or the watch (``ADDED``, ``MODIFIED``, ``DELETED``) delivered it; a
        subclass that needs the event's type overrides this, the others :meth:`_record`."""
        self._record(pod)


class BindOrder(PodWatcher):
    """A :class:`PodWatcher` that also keeps the order in which pods appeared and were first seen bound (the watch's
    order, which is the API server's), so a test can tell a gang bound whole, every member created before the first
    was bound, from one bound piecemeal as its members arrived.

    The order holds within one watch. A re-list (after the watch's 60 s, or a break) sees pods in name order, so a
    gang created and bound entirely between two watches could look piecemeal: keep a scenario well under a minute.
    """

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(kube, namespace)
        self._seq = 0
        self.created: dict[str, int] = {}
        self.bound: dict[str, int] = {}

    def start(self) -> BindOrder:
        super().start()
        return self

    def stop(self) -> None:
        """Stop recording; the (daemon) thread ends with its current watch, within a minute, unwaited for."""
        self._stop.set()

    def _record(self, pod: Mapping[str, Any]) -> None:
        super()._record(pod)
        name = str((pod.get("metadata") or {}).get("name") or "")
        if not name:
            return
        with self._lock:
            self._seq += 1
            self.created.setdefault(name, self._seq)
            if node_of(pod):
                self.bound.setdefault(name, self._seq)

    def piecemeal(self, members: Iterable[str], *, timeout: float = 30.0) -> str | None:
        """Why the gang ``members`` (pod names) was not bound whole, or None when it was. The watch trails a listing:
        a test that saw the members bound by listing them first waits (up to ``timeout``) until the watch has seen
        each one created and bound, so that the order is judged on what the watch saw, not on what it has yet to."""
        names = sorted(members)

        def seen() -> bool:
            with self._lock:
                return all(n in self.created and n in self.bound for n in names)

        deadline = time.monotonic() + timeout
        while not seen() and time.monotonic() < deadline:
            time.sleep(0.1)
        with self._lock:
            unseen = [n for n in names if n not in self.created]
            unbound = [n for n in names if n not in self.bound]
            if unseen or unbound:
                return f"never seen: {unseen}; never bound: {unbound}"
            last_created = max(names, key=lambda n: self.created[n])
            first_bound = min(names, key=lambda n: self.bound[n])
            if self.bound[first_bound] < self.created[last_created]:
                return f"{first_bound} was bound before {last_created} existed"
        return None


def list_custom(kube: Kube, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every object of one of gpusched's custom resources (in ``namespace``, or cluster-wide)."""
    items: list[dict[str, Any]] = kube.request("GET", Kube.custom_path(plural, namespace))["items"]
    return items


def patch_annotations(kube: Kube, namespace: str, name: str, annotations: Mapping[str, str | None]) -> dict[str, Any]:
    """Merge-patch a pod's annotations (None removes one), as ``kubectl annotate --overwrite`` would."""
    patched: dict[str, Any] = kube.request(
        "PATCH",
        Kube.pods_path(namespace, name),
        {"metadata": {"annotations": dict(annotations)}},
        content_type="application/merge-patch+json",
    )
    return patched


# ---- workloads and the PodGroups derived from them ----


def podgroups(s: Scenario) -> list[dict[str, Any]]:
    """The PodGroups of the scenario's namespace."""
    items: list[dict[str, Any]] = s.kube.request("GET", Kube.custom_path("podgroups", s.namespace)).get("items", [])
    return items


def delete_workload(s: Scenario, path: str, *, timeout: float) -> float:
    """Delete the workload at ``path`` as ``kubectl delete`` does (background propagation); wait until it is gone
    and the garbage collector has deleted the namespace's PodGroups with it; the seconds it took. The collector
    learns a newly installed resource from discovery every 30 s: the first deletion of a new kind takes longest."""
    assert podgroups(s), f"no PodGroup left to garbage-collect before {path} was deleted"
    started = time.monotonic()
    s.kube.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})

    def gone() -> bool:
        try:
            s.kube.request("GET", path)
        except APIError as exc:
            return exc.status == 404 and not podgroups(s)
        return False

    wait_until(
        gone,
        timeout=timeout,
        what=f"{path} deleted and its PodGroups garbage-collected with it",
        describe=lambda: f"PodGroups left: {[g['metadata']['name'] for g in podgroups(s)]}",
    )
    return time.monotonic() - started
