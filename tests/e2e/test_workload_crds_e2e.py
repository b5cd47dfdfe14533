"""Workloads the suite has no controller for: Kubeflow TrainJob and PyTorchJob, KubeRay RayCluster and MPIJob.

Their CRDs come from their own Go modules at pinned versions (``fetch-workload-crds.sh``, versions in
``workload-crds/go.mod``); the workload objects are submitted as the projects' docs show them, with ``schedulerName:
gpusched`` in the pod templates. Then this module plays each controller: it makes the children (pods, and the Jobs
or JobSet between) with the names, owner references (``controller: true``) and labels the controller's source at
that version gives them, so the grouper walks the same owner chain and reads the same labels as in a real cluster:

- PyTorchJob (training-operator v1): pods ``<job>-master-0``, ``<job>-worker-<i>`` owned by the PyTorchJob;
- TrainJob (trainer v2): a JobSet named after the TrainJob and owned by it, a Job per replicated job owned by the
  JobSet (the kube-controller-manager's Job controller makes their pods); only the ``node`` pods form the gang;
- RayCluster: head and worker pods owned by the RayCluster, ``generateName`` as KubeRay does;
- MPIJob v2beta1: worker pods owned by the MPIJob, the launcher a batch/v1 Job owned by the MPIJob.

Each scenario checks: one PodGroup owned by the workload with the derived ``minMember`` (and, for the PyTorchJob,
the queue its namespace names), its pods bound together only once all of them exist, and the PodGroup deleted by the
garbage collector with the workload.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import kube as kube_mod
from tests.e2e.kube import Kube, Scenario, node_of
from tests.e2e.skips import made_by

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"
RAYCLUSTERS = "/apis/ray.io/v1/namespaces/{ns}/rayclusters"
# Gaps between the pods made by hand: a scheduler that bound a gang's members as they arrived would be caught.
ARRIVAL_GAP = 0.7


def _crds_dir() -> Path:
    """The fetched CRDs: GPUSCHED_E2E_WORKLOAD_CRDS, or what fetch-workload-crds.sh finds or downloads."""
    given = os.environ.get("GPUSCHED_E2E_WORKLOAD_CRDS")
    if given:
        return Path(given)
    return made_by(HERE / "fetch-workload-crds.sh", failed="could not get the CRDs from their modules", timeout=600)


@pytest.fixture(scope="module")
def workload_crds(kube: Kube) -> Iterator[Path]:
    """The CRDs of TrainJob, PyTorchJob, RayCluster, MPIJob (and JobSet) installed and established."""
    out = _crds_dir()
    started = time.monotonic()
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(out / "crds"))
    kube.kubectl("wait", "--for=condition=established", "--timeout=60s", "-f", str(out / "crds"))
    print(f"\n[e2e] workload CRDs installed in {time.monotonic() - started:.1f}s from {out}")
    yield out


# --- what the controllers make ------------------------------------------------------------------------------------


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    """An owner reference as controller-runtime's NewControllerRef writes it."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _container(name: str, image: str, *, command: list[str] | None = None, gpus: int = 1) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    c: dict[str, Any] = {"name": name, "image": image, "resources": {"requests": res, "limits": res}}
    if command:
        c["command"] = command
    return c


def _pod_from_template(
    template: dict[str, Any],
    owner: dict[str, Any],
    labels: dict[str, str],
    *,
    name: str = "",
    generate_name: str = "",
    restart_policy: str | None = None,
    **spec_fields: Any,
) -> dict[str, Any]:
    """A pod as a controller makes it from a pod template: its labels over the template's, owned by ``owner``."""
    meta = template.get("metadata") or {}
    spec = copy.deepcopy(template["spec"])
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    spec.update(spec_fields)
    metadata: dict[str, Any] = {
        "labels": {**(meta.get("labels") or {}), **labels},
        "annotations": dict(meta.get("annotations") or {}),
        "ownerReferences": [_owner(owner)],
    }
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = generate_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _create_pods(s: Scenario, pods: list[dict[str, Any]]) -> list[str]:
    """Create ``pods`` one after another (``ARRIVAL_GAP`` apart); their names."""
    names = []
    for i, p in enumerate(pods):
        if i:
            time.sleep(ARRIVAL_GAP)
        created = s.kube.request("POST", Kube.pods_path(s.namespace), p)
        names.append(created["metadata"]["name"])
    return names


# --- checks ---------------------------------------------------------------------------------------------------------


def _one_gang(s: Scenario, name: str, min_member: int, owner: dict[str, Any], queue: str = "") -> dict[str, Any]:
    """Exactly one PodGroup, ``name``, with ``min_member`` (and ``queue``), controlled by ``owner`` (its uid)."""
    groups: list[dict[str, Any]] = kube_mod.wait_until(
        lambda: kube_mod.podgroups(s) or None,
        timeout=30,
        what=f"a PodGroup for {owner['kind']} {owner['metadata']['name']}",
        describe=s.describe,
    )
    assert [g["metadata"]["name"] for g in groups] == [name]
    group = groups[0]
    assert group["spec"]["minMember"] == min_member, group["spec"]
    assert group["spec"].get("queue", "") == queue, group["spec"]
    refs = [(r["kind"], r["name"], r["uid"], r.get("controller")) for r in group["metadata"]["ownerReferences"]]
    assert refs == [(owner["kind"], owner["metadata"]["name"], owner["metadata"]["uid"], True)], refs
    return group


def _bound_whole(s: Scenario, order: kube_mod.BindOrder, gang: str, members: list[str]) -> None:
    """Every member bound (Running, or Succeeded for a Job's), and none of them before the last one existed."""

    def bound() -> bool:
        pods = {p["metadata"]["name"]: p for p in s.pods()}
        return all(
            m in pods and node_of(pods[m]) and kube_mod.phase_of(pods[m]) in ("Running", "Succeeded") for m in members
        )

    kube_mod.wait_until(bound, timeout=60, what=f"the {len(members)} pods of {gang} bound", describe=s.describe)
    why = order.piecemeal(members)
    assert why is None, f"{gang} was bound piecemeal: {why}"


def _nodes(s: Scenario, count: int = 2) -> None:
    s.add_nodes([kube_mod.gpu_node(f"{s.name[:40]}-n{i}", rack=f"r{i % 2}") for i in range(count)])


def _timed(label: str, started: float) -> None:
    print(f"\n[e2e] {label}: {time.monotonic() - started:.1f}s")


# --- the scenarios ----------------------------------------------------------------------------------------------------


def test_a_pytorchjob_is_one_gang_in_its_namespaces_queue(sched: Scenario, workload_crds: Path) -> None:
    queue = f"{sched.name[:40]}-q"
    sched.create_queue(kube_mod.queue(queue))
    sched.kube.request(
        "PATCH",
        f"/api/v1/namespaces/{sched.namespace}",
        {"metadata": {"labels": {kube_mod.LABEL_QUEUE: queue}}},
        content_type="application/merge-patch+json",
    )
    _nodes(sched)
    sched.start_gpusched()
    order = kube_mod.BindOrder(sched.kube, sched.namespace).start()

    # training-operator examples/pytorch/simple.yaml (kubeflow.org/v1), with schedulerName and GPUs in the templates.
    def replica(replicas: int) -> dict[str, Any]:
        image = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "spec": {
                    "schedulerName": "gpusched",
                    "containers": [
                        _container("pytorch", image, command=["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"])
                    ],
                }
            },
        }

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pytorch-simple"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}},
    }
    path = PYTORCHJOBS.format(ns=sched.namespace)
    started = time.monotonic()
    try:
        job = sched.kube.request("POST", path, job)
        specs = job["spec"]["pytorchReplicaSpecs"]
        # pkg/controller.v1/common/pod.go: GenLabels + replica type (lower case) and index, job-role on the master;
        # the name GenGeneralName(job, rtype, index).
        pods = []
        for rtype, count in (("master", 1), ("worker", 2)):
            for i in range(count):
                labels = {
                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    "training.kubeflow.org/job-name": "pytorch-simple",
                    "training.kubeflow.org/replica-type": rtype,
                    "training.kubeflow.org/replica-index": str(i),
                }
                if rtype == "master":
                    labels["training.kubeflow.org/job-role"] = "master"
                template = specs[rtype.capitalize()]["template"]
                pods.append(
                    _pod_from_template(
                        template, job, labels, name=f"pytorch-simple-{rtype}-{i}", restart_policy="OnFailure"
                    )
                )
        members = _create_pods(sched, pods)
        _one_gang(sched, "pytorchjob-pytorch-simple", 3, job, queue=queue)
        _bound_whole(sched, order, "pytorchjob-pytorch-simple", members)
        _timed("PyTorchJob submitted to its gang bound", started)
        gc = kube_mod.delete_workload(sched, f"{path}/pytorch-simple", timeout=75)
        print(f"[e2e] PyTorchJob deleted, PodGroup collected: {gc:.1f}s")
    finally:
        order.stop()


def test_a_trainjob_is_one_gang_of_its_training_nodes_without_its_initializer(
    sched: Scenario, workload_crds: Path
) -> None:
    _nodes(sched)
    sched.start_gpusched()
    order = kube_mod.BindOrder(sched.kube, sched.namespace).start()
    # The Kubeflow Trainer getting-started TrainJob (trainer.kubeflow.org/v1alpha1) on the torch-distributed runtime.
    # A TrainJob has no pod template: schedulerName lives in the runtime's, so it is in the JobSet made below.
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "pytorch-simple"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                "command": ["torchrun", "train.py"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}},
            },
        },
    }
    ns = sched.namespace
    path = TRAINJOBS.format(ns=ns)
    started = time.monotonic()
    try:
        trainjob = sched.kube.request("POST", path, trainjob)

        def rjob(name: str, pods: int, container: dict[str, Any]) -> dict[str, Any]:
            return {
                "name": name,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": name.split("-")[0]}},
                    "spec": {
                        "parallelism": pods,
                        "completions": pods,
                        "completionMode": "Indexed",
                        "backoffLimit": 0,
                        "template": {
                            "spec": {
                                "schedulerName": "gpusched",
                                "restartPolicy": "OnFailure",
                                "containers": [container],
                            }
                        },
                    },
                },
            }

        # pkg/runtime/framework/plugins/jobset/jobset.go at v2.3.0: the JobSet has the TrainJob's name and namespace
        # and the TrainJob as its controller; the node job's parallelism = completions = numNodes. The dataset
        # initializer is the one a runtime with an initializer adds (constants.DatasetInitializer).
        initializer = rjob(
            "dataset-initializer",
            1,
            _container("dataset-initializer", "ghcr.io/kubeflow/trainer/dataset-initializer", gpus=0),
        )
        node = rjob(
            "node", 2, _container("node", trainjob["spec"]["trainer"]["image"], command=["torchrun", "train.py"])
        )
        jobset = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "pytorch-simple", "ownerReferences": [_owner(trainjob)]},
            "spec": {"replicatedJobs": [initializer, node]},
        }
        jobset = sched.kube.request("POST", JOBSETS.format(ns=ns), jobset)

        def child_job(r: dict[str, Any]) -> dict[str, Any]:
            """jobset_controller.go constructJob + labelAndAnnotateObject at v0.12.0: Job <jobset>-<rjob>-0, owned by
            the JobSet; the same labels on the Job and its pod template."""
            rname = r["name"]
            labels = {
                "jobset.sigs.k8s.io/jobset-name": "pytorch-simple",
                "jobset.sigs.k8s.io/jobset-uid": jobset["metadata"]["uid"],
                "jobset.sigs.k8s.io/replicatedjob-name": rname,
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
                "jobset.sigs.k8s.io/global-replicas": "2",
                "jobset.sigs.k8s.io/job-index": "0",
                "jobset.sigs.k8s.io/job-global-index": "0" if rname == "dataset-initializer" else "1",
                **r["template"]["metadata"]["labels"],
            }
            spec = copy.deepcopy(r["template"]["spec"])
            spec["template"].setdefault("metadata", {})["labels"] = labels
            spec["template"]["metadata"]["annotations"] = dict(labels)
            spec["template"]["spec"]["subdomain"] = "pytorch-simple"
            return {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"pytorch-simple-{rname}-0",
                    "labels": labels,
                    "annotations": dict(labels),
                    "ownerReferences": [_owner(jobset)],
                },
                "spec": spec,
            }

        # The node job dependsOn the initializer in a real runtime: the initializer runs first, outside any gang.
        sched.kube.request("POST", JOBS.format(ns=ns), child_job(initializer))

        def initializer_bound() -> bool:
            return any(node_of(p) for p in sched.pods("jobset.sigs.k8s.io/replicatedjob-name=dataset-initializer"))

        kube_mod.wait_until(
            initializer_bound, timeout=30, what="the dataset initializer bound on its own", describe=sched.describe
        )
        assert not kube_mod.podgroups(sched), "the initializer's pod must not make a gang"
        sched.kube.request("POST", JOBS.format(ns=ns), child_job(node))
        _one_gang(sched, "trainjob-pytorch-simple", 2, trainjob)
        nodes: list[str] = kube_mod.wait_until(
            lambda: (
                [p["metadata"]["name"] for p in sched.pods("jobset.sigs.k8s.io/replicatedjob-name=node")]
                if len(sched.pods("jobset.sigs.k8s.io/replicatedjob-name=node")) == 2
                else None
            ),
            timeout=30,
            what="the Job controller's 2 node pods",
        )
        _bound_whole(sched, order, "trainjob-pytorch-simple", nodes)
        _timed("TrainJob submitted to its gang bound", started)
        gc = kube_mod.delete_workload(sched, f"{path}/pytorch-simple", timeout=75)
        print(f"[e2e] TrainJob deleted, PodGroup collected: {gc:.1f}s")
    finally:
        order.stop()


def test_a_raycluster_is_one_gang_of_its_head_and_min_workers(sched: Scenario, workload_crds: Path) -> None:
    _nodes(sched)
    sched.start_gpusched()
    order = kube_mod.BindOrder(sched.kube, sched.namespace).start()
    # ray-operator/config/samples/ray-cluster.sample.yaml (ray.io/v1), with schedulerName and GPUs in the templates
    # and the worker group at 2 replicas (minReplicas 2).
    image = "rayproject/ray:2.46.0"
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "raycluster-kuberay"},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"schedulerName": "gpusched", "containers": [_container("ray-head", image, gpus=0)]}
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "workergroup",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 5,
                    "rayStartParams": {},
                    "template": {
                        "spec": {"schedulerName": "gpusched", "containers": [_container("ray-worker", image)]}
                    },
                }
            ],
        },
    }
    path = RAYCLUSTERS.format(ns=sched.namespace)
    started = time.monotonic()
    try:
        cluster = sched.kube.request("POST", path, cluster)

        # controllers/ray/common/pod.go labelPod at v1.6.1; the head pod named <cluster>-head-<random> and the
        # workers <cluster>-<group>-worker-<random> (utils.PodName with generateName).
        def labels(node_type: str, group: str) -> dict[str, str]:
            return {
                "ray.io/is-ray-node": "yes",
                "ray.io/cluster": "raycluster-kuberay",
                "ray.io/node-type": node_type,
                "ray.io/group": group,
                "ray.io/identifier": f"raycluster-kuberay-{node_type}",
                "app.kubernetes.io/name": "kuberay",
                "app.kubernetes.io/created-by": "kuberay-operator",
            }

        head = cluster["spec"]["headGroupSpec"]["template"]
        worker = cluster["spec"]["workerGroupSpecs"][0]["template"]
        pods = [
            _pod_from_template(
                head,
                cluster,
                labels("head", "headgroup"),
                generate_name="raycluster-kuberay-head-",
                restart_policy="Always",
            ),
            *(
                _pod_from_template(
                    worker,
                    cluster,
                    labels("worker", "workergroup"),
                    generate_name="raycluster-kuberay-workergroup-worker-",
                    restart_policy="Always",
                )
                for _ in range(2)
            ),
        ]
        members = _create_pods(sched, pods)
        _one_gang(sched, "raycluster-raycluster-kuberay", 3, cluster)
        _bound_whole(sched, order, "raycluster-raycluster-kuberay", members)
        _timed("RayCluster submitted to its gang bound", started)
        gc = kube_mod.delete_workload(sched, f"{path}/raycluster-kuberay", timeout=75)
        print(f"[e2e] RayCluster deleted, PodGroup collected: {gc:.1f}s")
    finally:
        order.stop()


def test_an_mpijob_is_one_gang_of_its_launcher_and_workers(sched: Scenario, workload_crds: Path) -> None:
    _nodes(sched)
    sched.start_gpusched()
    order = kube_mod.BindOrder(sched.kube, sched.namespace).start()
    # mpi-operator examples/v2beta1/pi/pi.yaml (kubeflow.org/v2beta1), with schedulerName and GPUs for the workers.
    image = "mpioperator/mpi-pi:openmpi"
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi"},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60},
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "schedulerName": "gpusched",
                            "containers": [
                                _container(
                                    "mpi-launcher", image, command=["mpirun", "-n", "2", "/home/mpiuser/pi"], gpus=0
                                )
                            ],
                        }
                    },
                },
                "Worker": {
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "schedulerName": "gpusched",
                            "containers": [
                                _container(
                                    "mpi-worker",
                                    image,
                                    command=["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"],
                                )
                            ],
                        }
                    },
                },
            },
        },
    }
    ns = sched.namespace
    path = MPIJOBS.format(ns=ns)
    started = time.monotonic()
    try:
        job = sched.kube.request("POST", path, job)
        specs = job["spec"]["mpiReplicaSpecs"]

        # pkg/controller/mpi_job_controller.go at v0.8.0: defaultLabels(job, role); workers <job>-worker-<i> owned
        # by the MPIJob with the replica index; the launcher a Job <job>-launcher owned by the MPIJob, its pod made
        # by the Job controller (launcherCreationPolicy AtStartup: created with the workers).
        def labels(role: str) -> dict[str, str]:
            return {
                "training.kubeflow.org/operator-name": "mpi-operator",
                "training.kubeflow.org/job-name": "pi",
                "training.kubeflow.org/job-role": role,
            }

        workers = [
            _pod_from_template(
                specs["Worker"]["template"],
                job,
                {**labels("worker"), "training.kubeflow.org/replica-index": str(i)},
                name=f"pi-worker-{i}",
                hostname=f"pi-worker-{i}",
                subdomain="pi",
            )
            for i in range(2)
        ]
        members = _create_pods(sched, workers)
        # Two of three members exist: nothing may be bound until the launcher's pod is there too.
        sched.stays_unbound(members, 3.0)
        launcher_template = copy.deepcopy(specs["Launcher"]["template"])
        launcher_template.setdefault("metadata", {})["labels"] = labels("launcher")
        launcher_template["spec"].update({"hostname": "pi-launcher", "subdomain": "pi", "restartPolicy": "OnFailure"})
        launcher = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "pi-launcher", "labels": {"app": "pi"}, "ownerReferences": [_owner(job)]},
            "spec": {"template": launcher_template},
        }
        sched.kube.request("POST", JOBS.format(ns=ns), launcher)
        _one_gang(sched, "mpijob-pi", 3, job)
        launchers: list[str] = kube_mod.wait_until(
            lambda: [p["metadata"]["name"] for p in sched.pods("training.kubeflow.org/job-role=launcher")] or None,
            timeout=30,
            what="the launcher Job's pod",
        )
        _bound_whole(sched, order, "mpijob-pi", members + launchers)
        _timed("MPIJob submitted to its gang bound", started)
        gc = kube_mod.delete_workload(sched, f"{path}/pi", timeout=75)
        print(f"[e2e] MPIJob deleted, PodGroup collected: {gc:.1f}s")
    finally:
        order.stop()
