"""``gpusched snapshot``: the cluster of a kubeconfig as it is now, written for ``gpusched simulate --snapshot``.

A platform team decides on its scheduler settings for its own cluster, not for a synthetic one: this command lists
the nodes, the pods that hold resources (running, and pending), the PodGroups and the Queues from the API server and
writes them to ``DIR/snapshot.json``, which the simulator reads with the operator's own parsers
(``scheduler.sim.snapshot``). Objects are kept as the API server returns them, less what scheduling never reads
(managed fields, owner references, status conditions, container statuses), so that a node's labels and taints, a
pod's affinity, tolerations, priority, queue and gang all reach the simulator as they reach the operator.

With ``--hash-names`` the names of nodes, pods, namespaces and PodGroups become ``node-``/``pod-``/``ns-``/
``group-`` and a hash, everywhere they are named (a pod's ``spec.nodeName``, the node's hostname label, the pod's
PodGroup label, a node named in a pod's node selector or node affinity, the namespaces of its pod affinity terms);
the salt is drawn for each export and not written, so two exports cannot be matched by name and a guessable name
cannot be found again by hashing it. Label and annotation values other than those are kept:
scheduling reads them (node selectors, queues).

A cluster shared by several teams, or a test's share of a shared control plane, is exported in part:
``--node-selector`` keeps the nodes of a label selector, ``--namespace`` the pending pods (and PodGroups) of some
namespaces. Whatever runs on a kept node is kept, whatever its namespace: it holds the node's room, and without it the
simulator would place pods where there is none. A pod on a node that is not kept is dropped, as is its room.

Only ``scheduler.k8s`` talks to the API server, so the export lives here and writes plain JSON; the simulator
never imports this module.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.crds import podgroup as api_podgroup
from scheduler.api.crds import queue as api_queue
from scheduler.api.crds.topology import LABEL_HOSTNAME
from scheduler.api.objects.pod import LABEL_POD_GROUP, LABEL_POD_GROUP_COMPAT
from scheduler.k8s import client as k8s_client
from scheduler.k8s import logs

#: What ``gpusched simulate --snapshot`` reads (``scheduler.sim.snapshot.FORMAT`` says the same).
FORMAT = "gpusched-snapshot/v1"
FILE_NAME = "snapshot.json"

#: The parts of an object scheduling reads; the rest (managedFields, ownerReferences, conditions...) is dropped.
_META_KEYS = ("name", "namespace", "labels", "annotations", "creationTimestamp", "deletionTimestamp")
_NODE_STATUS_KEYS = ("allocatable", "capacity")
_POD_STATUS_KEYS = ("phase", "reason")


class Names:
    """Hashes names with a salt drawn once per export (the same name always gets the same hash in one export)."""

    def __init__(self, *, hashed: bool, salt: bytes | None = None) -> None:
        self.hashed = hashed
        self.salt = secrets.token_bytes(16) if salt is None else salt

    def __call__(self, kind: str, name: str) -> str:
        if not self.hashed or not name:
            return name
        digest = hashlib.sha256(self.salt + f"{kind}/{name}".encode()).hexdigest()[:12]
        return f"{kind}-{digest}"


def _meta(raw: Mapping[str, Any], names: Names, *, kind: str) -> dict[str, Any]:
    meta = raw.get("metadata") or {}
    out = {key: meta[key] for key in _META_KEYS if meta.get(key) is not None}
    out["name"] = names(kind, str(meta.get("name") or ""))
    if "namespace" in out:
        out["namespace"] = names("ns", str(out["namespace"]))
    return out


def node(raw: Mapping[str, Any], names: Names) -> dict[str, Any]:
    """A node as the simulator needs it: its name, labels, annotations, taints and capacity."""
    meta = _meta(raw, names, kind="node")
    labels = dict(meta.get("labels") or {})
    if LABEL_HOSTNAME in labels:
        labels[LABEL_HOSTNAME] = names("node", str(labels[LABEL_HOSTNAME]))
        meta["labels"] = labels
    status = raw.get("status") or {}
    return {
        "metadata": meta,
        "spec": dict(raw.get("spec") or {}),
        "status": {key: status[key] for key in _NODE_STATUS_KEYS if key in status},
    }


def pod(raw: Mapping[str, Any], names: Names) -> dict[str, Any]:
    """A pod as the simulator needs it: its spec (requests, node, affinity...), labels and phase."""
    meta = _meta(raw, names, kind="pod")
    meta["uid"] = names("uid", str((raw.get("metadata") or {}).get("uid") or ""))
    labels = dict(meta.get("labels") or {})
    for key in (LABEL_POD_GROUP, LABEL_POD_GROUP_COMPAT):
        if key in labels:
            labels[key] = names("group", str(labels[key]))
    if labels:
        meta["labels"] = labels
    spec = dict(raw.get("spec") or {})
    if spec.get("nodeName"):
        spec["nodeName"] = names("node", str(spec["nodeName"]))
    if names.hashed:
        spec = _named_references(spec, names)
    status = raw.get("status") or {}
    return {
        "metadata": meta,
        "spec": spec,
        "status": {key: status[key] for key in _POD_STATUS_KEYS if key in status},
    }


def _named_references(spec: dict[str, Any], names: Names) -> dict[str, Any]:
    """A pod's spec with the names it refers to hashed as the objects' own are: a node selected by its hostname label
    or by ``metadata.name`` (node affinity), and the namespaces of pod (anti-)affinity terms."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and LABEL_HOSTNAME in selector:
        spec["nodeSelector"] = {**selector, LABEL_HOSTNAME: names("node", str(selector[LABEL_HOSTNAME]))}
    if isinstance(spec.get("affinity"), Mapping):
        spec["affinity"] = _walk(spec["affinity"], names)
    return spec


def _walk(value: Any, names: Names) -> Any:
    """``value`` (a part of an affinity) with node names and namespaces hashed wherever a term names them."""
    if isinstance(value, list):
        return [_walk(item, names) for item in value]
    if not isinstance(value, Mapping):
        return value
    out = {key: _walk(item, names) for key, item in value.items()}
    if isinstance(out.get("namespaces"), list):
        out["namespaces"] = [names("ns", str(ns)) for ns in out["namespaces"]]
    if out.get("key") in (LABEL_HOSTNAME, "metadata.name") and isinstance(out.get("values"), list):
        out["values"] = [names("node", str(v)) for v in out["values"]]
    return out


def podgroup(raw: Mapping[str, Any], names: Names) -> dict[str, Any]:
    meta = _meta(raw, names, kind="group")
    return {"apiVersion": raw.get("apiVersion"), "kind": "PodGroup", "metadata": meta, "spec": raw.get("spec") or {}}


def queue(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A Queue as it is: its name and spec are the settings being compared, not a tenant's secret."""
    meta = raw.get("metadata") or {}
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": "Queue",
        "metadata": {"name": meta.get("name")},
        "spec": raw.get("spec") or {},
    }


def holds_resources(raw: Mapping[str, Any]) -> bool:
    """Whether a pod counts in the snapshot: running or pending, not finished."""
    return str((raw.get("status") or {}).get("phase") or "Pending") not in ("Succeeded", "Failed")


def _namespace(raw: Mapping[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("namespace") or "default")


def kept(raw: Mapping[str, Any], *, nodes: Collection[str], namespaces: Collection[str]) -> bool:
    """Whether the export keeps a pod: it holds or waits for resources, and it is on one of ``nodes`` (whatever its
    namespace: it holds that node's room), or pending in one of ``namespaces`` (empty: in any)."""
    if not holds_resources(raw):
        return False
    on = (raw.get("spec") or {}).get("nodeName")
    if on:
        return str(on) in nodes
    return not namespaces or _namespace(raw) in namespaces


def document(
    *,
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    podgroups: Sequence[Mapping[str, Any]] = (),
    queues: Sequence[Mapping[str, Any]] = (),
    names: Names,
    taken: str,
    node_selector: str = "",
    namespaces: Collection[str] = (),
) -> dict[str, Any]:
    """The snapshot file's content from the objects as the API server listed them: ``nodes`` (those of
    ``node_selector``, which is only recorded here), the pods :func:`kept`, the PodGroups of their namespaces."""
    node_names = {str((n.get("metadata") or {}).get("name") or "") for n in nodes}
    pods = [p for p in pods if kept(p, nodes=node_names, namespaces=namespaces)]
    spaces = {_namespace(p) for p in pods}
    return {
        "format": FORMAT,
        "taken": taken,
        "hashedNames": names.hashed,
        # A selector may name nodes (kubernetes.io/hostname in (...)): with names hashed it is not written.
        "selection": {
            "nodeSelector": None if names.hashed else node_selector or None,
            "namespaces": sorted(names("ns", ns) for ns in namespaces),
        },
        "nodes": [node(n, names) for n in nodes],
        "pods": [pod(p, names) for p in pods],
        "podGroups": [podgroup(g, names) for g in podgroups if _namespace(g) in spaces],
        "queues": [queue(q) for q in queues],
    }


async def _list(client: k8s_client.Client, what: str, method: Callable[..., Any], **query: Any) -> list[Any]:
    answer = await client.call(method, **query)
    if not answer.ok:
        raise InvalidObject(f"cannot list {what}: {answer.message}", obj="gpusched snapshot")
    return list(answer.body.get("items") or [])


async def _custom(client: k8s_client.Client, group: str, version: str, plural: str) -> list[Any]:
    """A CRD's objects; none when the CRD is not installed (a cluster without gpusched yet)."""
    answer = await client.call(client.custom.list_cluster_custom_object, group, version, plural)
    if answer.status == 404:
        return []
    if not answer.ok:
        raise InvalidObject(f"cannot list {plural}.{group}: {answer.message}", obj="gpusched snapshot")
    return list(answer.body.get("items") or [])


async def take(
    settings: k8s_client.ClientSettings, *, names: Names, node_selector: str = "", namespaces: Collection[str] = ()
) -> dict[str, Any]:
    """List the cluster and make the snapshot (see :func:`document`)."""
    client = await k8s_client.connect(settings)
    try:
        if node_selector:
            nodes = await _list(client, "nodes", client.core.list_node, label_selector=node_selector)
        else:
            nodes = await _list(client, "nodes", client.core.list_node)
        pods = await _list(client, "pods", client.core.list_pod_for_all_namespaces)
        groups = await _custom(client, api_podgroup.GROUP, api_podgroup.VERSION, api_podgroup.PLURAL)
        queues = await _custom(client, api_queue.GROUP, api_queue.VERSION, api_queue.PLURAL)
    finally:
        await client.close()
    taken = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return document(
        nodes=nodes,
        pods=pods,
        podgroups=groups,
        queues=queues,
        names=names,
        taken=taken,
        node_selector=node_selector,
        namespaces=namespaces,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help=f"the folder to write {FILE_NAME} into")
    parser.add_argument(
        "--hash-names",
        action="store_true",
        help="replace the names of nodes, pods, namespaces and PodGroups by salted hashes, wherever they are named "
        "(other label values and the Queues are kept)",
    )
    parser.add_argument(
        "--node-selector",
        default="",
        metavar="SELECTOR",
        help="only the nodes of this label selector (as kubectl get nodes -l takes it, e.g. pool=a100); pods on "
        "other nodes are left out, whatever runs on these is kept (it holds their room)",
    )
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="only the pending pods and PodGroups of this namespace (repeatable; default: all namespaces); pods "
        "running on the exported nodes are kept whatever their namespace",
    )
    parser.add_argument("--kubeconfig", help="a kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
    parser.add_argument("--context", help="a context of the kubeconfig")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one list may take")


def main(args: argparse.Namespace) -> int:
    logs.configure("auto", level=logging.WARNING)
    folder = Path(args.out)
    if folder.exists() and not folder.is_dir():
        raise InvalidObject(f"{folder} is not a folder", obj="gpusched snapshot", field="--out")
    settings = k8s_client.ClientSettings(
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        context=args.context,
        qps=0,
        timeout=args.timeout,
    )
    snapshot = asyncio.run(
        take(
            settings,
            names=Names(hashed=args.hash_names),
            node_selector=args.node_selector,
            namespaces=frozenset(args.namespace),
        )
    )
    if not snapshot["nodes"]:
        # Nothing to simulate on; said now, not when the simulator reads an empty file.
        where = f"no node matches {args.node_selector!r}" if args.node_selector else "the cluster has no nodes"
        raise InvalidObject(where, obj="gpusched snapshot", field="--node-selector" if args.node_selector else "")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FILE_NAME).write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        raise InvalidObject(f"cannot write: {exc.strerror}", obj=f"folder {folder}") from None
    pending = sum(1 for p in snapshot["pods"] if not p["spec"].get("nodeName"))
    print(
        f"wrote {folder / FILE_NAME}: {len(snapshot['nodes'])} nodes, {len(snapshot['pods']) - pending} pods on nodes, "
        f"{pending} pending, {len(snapshot['podGroups'])} PodGroups, {len(snapshot['queues'])} Queues"
        + (f" (nodes matching {args.node_selector})" if args.node_selector else "")
        + (f" (pending pods of {', '.join(sorted(args.namespace))})" if args.namespace else "")
        + (" (names hashed)" if snapshot["hashedNames"] else "")
    )
    print(f"try: gpusched simulate --snapshot {folder} --config CURRENT.yaml --config CANDIDATE.yaml")
    return 0
