"""Pods an admission controller holds back, Kueue's above all: what a gated pod waits for, and whether Kueue admitted
a workload's pods.

A pod with ``spec.schedulingGates`` is not ready for any scheduler: the API server refuses to bind it, and it has
``PodScheduled=False/SchedulingGated``. gpusched never tries such a pod (``scheduler.k8s.feeds.feed`` keeps it out of
the queue); it keeps a :class:`Gated` record of it instead, so that ``gpusched explain`` and the metrics count it as
*waiting for admission*, not as unschedulable.

Kueue's gates and labels, as Kueue v0.19 writes them (``pkg/constants``, ``apis/kueue/v1beta2``):

- ``kueue.x-k8s.io/admission``: a pod of Kueue's pod integration (plain pods with ``kueue.x-k8s.io/queue-name``),
  gated until its Workload is admitted; the pod names its LocalQueue by that label;
- ``kueue.x-k8s.io/topology``: a pod of a workload admitted with Topology-Aware Scheduling, gated until Kueue's
  ungater writes its assigned domain's labels into its ``nodeSelector``;
- ``kueue.x-k8s.io/elastic-job``: a pod of a workload slice not admitted yet;
- on the pods of every admitted workload, Kueue writes ``kueue.x-k8s.io/podset`` (the PodSet), and the
  ``kueue.x-k8s.io/local-queue-name``/``cluster-queue-name`` labels that say which queues admitted it
  (``kueue.x-k8s.io/workload`` names the Workload when TAS is on).

Kueue reserves quota for every pod of a PodSet when it admits the workload: :func:`kueue_admitted` is what
``scheduler.api.objects.workloads`` reads to make such a workload's pods one gang of all its pods.

Pure: parses a pod's body, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KUEUE_PREFIX = "kueue.x-k8s.io/"
#: Kueue's pod integration: gated until the pod's Workload is admitted.
GATE_KUEUE_ADMISSION = "kueue.x-k8s.io/admission"
#: Kueue's Topology-Aware Scheduling: gated until the ungater writes the assigned domain into the nodeSelector.
GATE_KUEUE_TOPOLOGY = "kueue.x-k8s.io/topology"
#: Kueue's elastic jobs: gated until the workload slice is admitted.
GATE_KUEUE_ELASTIC = "kueue.x-k8s.io/elastic-job"
#: On a workload (or a plain pod of the pod integration): the LocalQueue it is submitted to.
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
#: On an admitted workload's pods: the PodSet of the Workload it belongs to.
LABEL_KUEUE_PODSET = "kueue.x-k8s.io/podset"
#: On an admitted workload's pods: the LocalQueue and the ClusterQueue that admitted it.
LABEL_KUEUE_LOCAL_QUEUE = "kueue.x-k8s.io/local-queue-name"
LABEL_KUEUE_CLUSTER_QUEUE = "kueue.x-k8s.io/cluster-queue-name"
#: On an admitted workload's pods (Kueue with TAS): the Workload's name.
ANNOTATION_KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"


@dataclass(frozen=True, slots=True)
class Gated:
    """A pod held back by scheduling gates: who holds it and, for Kueue, in which queues."""

    namespace: str
    name: str
    gates: tuple[str, ...]
    #: The LocalQueue the pod (or its workload) is submitted to ("" when not Kueue's or not said).
    local_queue: str = ""
    #: The ClusterQueue that admitted it ("" before admission: Kueue writes it on admitted pods only).
    cluster_queue: str = ""
    #: The Kueue Workload it belongs to ("" when not said).
    workload: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def by_kueue(self) -> bool:
        """Whether Kueue holds it (any of its gates is Kueue's)."""
        return any(gate.startswith(KUEUE_PREFIX) for gate in self.gates)

    def text(self) -> str:
        """What it waits for, in a sentence: what ``gpusched explain`` tells."""
        gates = ", ".join(self.gates)
        queues = []
        if self.cluster_queue:
            queues.append(f"ClusterQueue {self.cluster_queue}")
        if self.local_queue:
            queues.append(f"LocalQueue {self.namespace}/{self.local_queue}")
        where = f" ({', '.join(queues)})" if queues else ""
        workload = f", Workload {self.namespace}/{self.workload}" if self.workload else ""
        if GATE_KUEUE_ADMISSION in self.gates or GATE_KUEUE_ELASTIC in self.gates:
            said = f"waits for admission: Kueue holds it{where}{workload} until its Workload is admitted"
        elif GATE_KUEUE_TOPOLOGY in self.gates:
            said = (
                f"admitted by Kueue{where}{workload}; waits for Kueue to assign its topology domain"
                " (Kueue writes the domain into its nodeSelector, then removes the gate)"
            )
        else:
            said = "waits for admission: held by its scheduling gates until whoever set them removes them"
        return f"{said}; scheduling gates: {gates}. gpusched does not try it until they are gone."


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def gated(body: Mapping[str, Any]) -> Gated | None:
    """The pod's :class:`Gated` record when it has scheduling gates and no node yet, else None."""
    spec = _map(body.get("spec"))
    raw = spec.get("schedulingGates")
    if not raw or not isinstance(raw, list) or spec.get("nodeName"):
        return None
    gates = tuple(str(g.get("name") or "") for g in raw if isinstance(g, Mapping))
    meta = _map(body.get("metadata"))
    labels = _map(meta.get("labels"))
    annotations = _map(meta.get("annotations"))
    return Gated(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        gates=gates,
        local_queue=str(labels.get(LABEL_KUEUE_LOCAL_QUEUE) or labels.get(LABEL_KUEUE_QUEUE) or ""),
        cluster_queue=str(labels.get(LABEL_KUEUE_CLUSTER_QUEUE) or ""),
        workload=str(annotations.get(ANNOTATION_KUEUE_WORKLOAD) or ""),
    )


def kueue_admitted(pod_labels: Mapping[str, Any]) -> bool:
    """Whether Kueue started this pod's workload: it labels the pods of an admitted workload with their PodSet."""
    return bool(pod_labels.get(LABEL_KUEUE_PODSET))
