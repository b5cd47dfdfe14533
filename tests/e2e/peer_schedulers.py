"""The peer schedulers gpusched is measured against: Volcano and scheduler-plugins' Coscheduling (throughput), and
scheduler-plugins' NodeResourceTopologyMatch (NUMA, benchmarks/numa_peers.py).

benchmarks/e2e_throughput.py runs each on a LocalCluster of the same shape as its other cases. This module
holds what differs per peer, so that the benchmark's loop stays one loop:

- how each scheduler is told a pod is its own and how it expresses a gang (a PodGroup object of its own API
  group plus a pod annotation or label), in :func:`gang_workload` and :func:`single_pods`;
- the configuration each is started with (Volcano's default actions and plugins; a KubeSchedulerConfiguration
  enabling Coscheduling), both with the client QPS and burst the benchmark matches across cases;
- the processes: binaries from tests/e2e/build-peers.sh, one log file each in the cluster's work directory,
  each process group tracked by the cluster so that nothing outlives it.

The manifests are plain dicts with no I/O, so tests/e2e/test_peer_schedulers.py checks them without a cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e import kube
from tests.e2e.localcluster import LocalCluster, free_port

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-peers.sh"

#: The peers, and gpusched itself, by the name the benchmark's gang cases use.
PEERS = ("gpusched", "volcano", "coscheduling")

VOLCANO_SCHEDULER_NAME = "volcano"
VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
#: The annotation by which Volcano's scheduler finds a pod's PodGroup (a pod without it is not scheduled until
#: Volcano's podgroup controller has made it a PodGroup of one and written the annotation).
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE = "default"

#: The name the scheduler-plugins scheduler's profile answers to (its Helm chart's second-scheduler name).
COSCHEDULING_SCHEDULER_NAME = "scheduler-plugins-scheduler"
COSCHEDULING_GROUP = "scheduling.x-k8s.io"
COSCHEDULING_VERSION = "v1alpha1"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: The name the scheduler-plugins scheduler answers to when it runs NodeResourceTopologyMatch
#: (benchmarks/numa_peers.py).
NRT_SCHEDULER_NAME = "topo-aware-scheduler"

#: Volcano's scheduler configuration as its documentation gives the default: the three actions of a plain
#: install and the default plugins in their two tiers. Written out so that the benchmark says what it ran.
VOLCANO_SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""


def scheduler_name(peer: str) -> str:
    """The ``spec.schedulerName`` of the pods ``peer`` schedules."""
    return {
        "gpusched": kube.SCHEDULER_NAME,
        "volcano": VOLCANO_SCHEDULER_NAME,
        "coscheduling": COSCHEDULING_SCHEDULER_NAME,
    }[peer]


def group_path(peer: str, namespace: str) -> str:
    """The API path PodGroups of ``peer`` are created at."""
    if peer == "gpusched":
        return kube.Kube.custom_path("podgroups", namespace)
    group, version = {
        "volcano": (VOLCANO_GROUP, VOLCANO_VERSION),
        "coscheduling": (COSCHEDULING_GROUP, COSCHEDULING_VERSION),
    }[peer]
    return f"/apis/{group}/{version}/namespaces/{namespace}/podgroups"


def podgroup(peer: str, name: str, *, min_member: int) -> dict[str, Any]:
    """A PodGroup of ``min_member`` pods, as ``peer`` spells it."""
    if peer == "gpusched":
        return kube.podgroup(name, min_member=min_member)
    if peer == "volcano":
        # The queue is named because no admission webhook runs here to default it.
        spec: dict[str, Any] = {"minMember": min_member, "queue": VOLCANO_QUEUE}
        api = f"{VOLCANO_GROUP}/{VOLCANO_VERSION}"
    elif peer == "coscheduling":
        spec = {"minMember": min_member}
        api = f"{COSCHEDULING_GROUP}/{COSCHEDULING_VERSION}"
    else:
        raise ValueError(f"unknown peer {peer!r}; choose from {PEERS}")
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def gang_member(peer: str, name: str, group: str) -> dict[str, Any]:
    """A one-GPU pod of the gang ``group``, for ``peer``."""
    if peer == "gpusched":
        return kube.pod(name, gpus=1, group=group)
    manifest = kube.pod(name, gpus=1, scheduler_name=scheduler_name(peer))
    if peer == "volcano":
        manifest["metadata"].setdefault("annotations", {})[VOLCANO_GROUP_ANNOTATION] = group
    else:
        manifest["metadata"].setdefault("labels", {})[COSCHEDULING_GROUP_LABEL] = group
    return manifest


def gang_workload(
    peer: str, *, gangs: int, gang_size: int, namespace: str
) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """``gangs`` gangs of ``gang_size`` one-GPU pods for ``peer``: ((path, PodGroup) to create first, pods)."""
    groups: list[tuple[str, dict[str, Any]]] = []
    pods: list[dict[str, Any]] = []
    path = group_path(peer, namespace)
    for g in range(gangs):
        name = f"gang-{g:04d}"
        groups.append((path, podgroup(peer, name, min_member=gang_size)))
        pods += [gang_member(peer, f"{name}-{m}", name) for m in range(gang_size)]
    return groups, pods


def single_pods(peer: str, count: int) -> list[dict[str, Any]]:
    """``count`` one-GPU pods of no gang for ``peer``."""
    return [kube.pod(f"pod-{i:05d}", gpus=1, scheduler_name=scheduler_name(peer)) for i in range(count)]


def coscheduling_config(kubeconfig: str | os.PathLike[str], *, qps: float, burst: int) -> dict[str, Any]:
    """The scheduler-plugins scheduler's KubeSchedulerConfiguration: one profile with Coscheduling at every
    extension point it implements and as the queue sort (its documented setup), client QPS and burst as the
    other cases', no leader election (one replica)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": float(qps), "burst": int(burst)},
        "profiles": [
            {
                "schedulerName": COSCHEDULING_SCHEDULER_NAME,
                "plugins": {
                    "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                    "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
                },
            }
        ],
    }


def binaries() -> Path:
    """The directory of the peers' binaries and CRDs: tests/e2e/build-peers.sh's (instant when cached, minutes
    the first time)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def cached_binaries() -> tuple[Path | None, str]:
    """The peers' directory if tests/e2e/build-peers.sh has built it already (None otherwise), and why not."""
    env = {**os.environ, "GPUSCHED_PEERS_NO_BUILD": "1"}
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["tests/e2e/build-peers.sh failed"])[-1]
    return Path(proc.stdout.strip().splitlines()[-1]), ""


def crd_files(bin_dir: Path, peer: str) -> list[Path]:
    """The CRD manifests ``peer`` needs, from its module."""
    return sorted((bin_dir / "crds" / peer).glob("*.yaml"))


@dataclass
class PeerProcess:
    """One peer component: its command line, its log, its process group (tracked by the cluster)."""

    name: str
    argv: list[str]
    log_path: Path
    #: A URL whose answer ``ok`` says the component is up (None: no health endpoint asked for).
    healthz: str | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, cluster: LocalCluster) -> PeerProcess:
        with open(self.log_path, "ab") as log:
            log.write(f"===== {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        cluster.track_process(self.popen.pid)
        return self

    def check_running(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"{self.name} exited {self.popen.returncode}; {self.log_path}:\n" + "\n".join(tail))

    def wait_healthy(self, timeout: float = 120.0) -> None:
        if self.healthz is None:
            return
        context = ssl.create_default_context()
        # The components serve their health on self-signed certificates, on loopback.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        while True:
            self.check_running()
            with contextlib.suppress(OSError), urllib.request.urlopen(self.healthz, timeout=2, context=context) as r:
                if r.read().decode().strip() == "ok":
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not healthy at {self.healthz} after {timeout:.0f} s")
            time.sleep(0.5)

    def stop(self, cluster: LocalCluster) -> None:
        p = self.popen
        if p is None:
            return
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        cluster.untrack_process(p.pid)


def volcano_processes(
    cluster: LocalCluster, bin_dir: Path, *, qps: float, burst: int
) -> tuple[PeerProcess, PeerProcess]:
    """Volcano's controller manager (podgroup and queue controllers only) and its scheduler.

    The controller manager is needed twice over: its podgroup controller gives each plain pod the PodGroup of
    one without which Volcano's scheduler leaves it alone, and its queue controller opens the ``default`` queue
    (the proportion plugin skips a queue that is not Open). Its job, cronjob and other controllers have nothing
    to do in this benchmark and stay off.
    """
    assert cluster.workdir is not None
    workdir = cluster.workdir
    conf = workdir / "volcano-scheduler.conf"
    conf.write_text(VOLCANO_SCHEDULER_CONF)
    client = [f"--kubeconfig={cluster.kubeconfig}", f"--kube-api-qps={qps:g}", f"--kube-api-burst={burst}"]
    controllers_health = free_port()
    controllers = PeerProcess(
        "vc-controller-manager",
        [
            str(bin_dir / "vc-controller-manager"),
            *client,
            "--leader-elect=false",
            "--controllers=pg-controller,queue-controller",
            f"--listen-address=127.0.0.1:{free_port()}",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{controllers_health}",
        ],
        workdir / "vc-controller-manager.log",
        healthz=f"http://127.0.0.1:{controllers_health}/healthz",
    )
    scheduler_health = free_port()
    scheduler = PeerProcess(
        "vc-scheduler",
        [
            str(bin_dir / "vc-scheduler"),
            *client,
            "--leader-elect=false",
            f"--scheduler-conf={conf}",
            f"--listen-address=127.0.0.1:{free_port()}",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{scheduler_health}",
        ],
        workdir / "vc-scheduler.log",
        healthz=f"http://127.0.0.1:{scheduler_health}/healthz",
    )
    return controllers, scheduler


def coscheduling_process(cluster: LocalCluster, bin_dir: Path, *, qps: float, burst: int) -> PeerProcess:
    """The scheduler-plugins scheduler from :func:`coscheduling_config`, serving health on a free port."""
    return sp_scheduler_process(cluster, bin_dir, coscheduling_config(cluster.kubeconfig, qps=qps, burst=burst))


def nrt_config(kubeconfig: str | os.PathLike[str], *, scoring: str, resync_seconds: int | None) -> dict[str, Any]:
    """The scheduler-plugins scheduler's KubeSchedulerConfiguration for NodeResourceTopologyMatch (its documented
    setup: the plugin at every extension point it implements), scoring by ``scoring`` (``LeastNUMANodes``,
    ``MostAllocated``...); with ``resync_seconds``, ``cacheResyncPeriodSeconds``: the overreserve cache, which
    counts the pods it reserved on a node until the node's object is resynced, instead of reading the objects as
    published."""
    args: dict[str, Any] = {"scoringStrategy": {"type": scoring}}
    if resync_seconds is not None:
        args["cacheResyncPeriodSeconds"] = int(resync_seconds)
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "profiles": [
            {
                "schedulerName": NRT_SCHEDULER_NAME,
                "plugins": {"multiPoint": {"enabled": [{"name": "NodeResourceTopologyMatch"}]}},
                "pluginConfig": [{"name": "NodeResourceTopologyMatch", "args": args}],
            }
        ],
    }


def nrt_process(cluster: LocalCluster, bin_dir: Path, *, scoring: str, resync_seconds: int | None) -> PeerProcess:
    """The scheduler-plugins scheduler from :func:`nrt_config`, serving health on a free port."""
    return sp_scheduler_process(
        cluster, bin_dir, nrt_config(cluster.kubeconfig, scoring=scoring, resync_seconds=resync_seconds)
    )


def sp_scheduler_process(cluster: LocalCluster, bin_dir: Path, config: Mapping[str, Any]) -> PeerProcess:
    """The scheduler-plugins scheduler started with ``config`` (a KubeSchedulerConfiguration)."""
    assert cluster.workdir is not None
    path = cluster.workdir / "sp-scheduler-config.yaml"
    path.write_text(json.dumps(config, indent=2))
    port = free_port()
    return PeerProcess(
        "sp-scheduler",
        [
            str(bin_dir / "sp-scheduler"),
            f"--config={path}",
            f"--authentication-kubeconfig={cluster.kubeconfig}",
            f"--authorization-kubeconfig={cluster.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cluster.workdir / 'sp-scheduler-certs'}",
        ],
        cluster.workdir / "sp-scheduler.log",
        healthz=f"https://127.0.0.1:{port}/healthz",
    )


def volcano_queues() -> list[dict[str, Any]]:
    """The ``root`` and ``default`` queues, as Volcano's scheduler makes them when absent (weight 1; only the
    default one reclaimable). Created before the pods: the queue controller opens a queue only once its parent
    exists, and the proportion plugin skips a queue that is not Open."""

    def queue(name: str, *, reclaimable: bool) -> dict[str, Any]:
        return {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 1, "reclaimable": reclaimable},
        }

    return [queue("root", reclaimable=False), queue(VOLCANO_QUEUE, reclaimable=True)]


def queue_path(name: str = "") -> str:
    return f"/apis/{VOLCANO_GROUP}/{VOLCANO_VERSION}/queues" + (f"/{name}" if name else "")


def apply_crds(cluster: LocalCluster, bin_dir: Path, peer: str) -> None:
    """Install ``peer``'s CRDs and wait until they serve."""
    files: Sequence[Path] = crd_files(bin_dir, peer)
    if not files:
        raise RuntimeError(f"no CRDs for {peer} under {bin_dir / 'crds'}")
    k = kube.Kube.of_local(cluster)
    for path in files:
        k.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    for path in files:
        k.kubectl("wait", "--for=condition=established", "--timeout=60s", "-f", str(path))
    k.warm_lists(files)  # as for gpusched's own types: no scheduler meets a cold watch cache


def groups_named(cluster: LocalCluster, peer: str, namespace: str) -> int:
    """How many PodGroups of ``peer`` exist in ``namespace``."""
    items: Mapping[str, Any] = cluster.request("GET", group_path(peer, namespace))
    return len(items.get("items", []))
