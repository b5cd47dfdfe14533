#!/usr/bin/env python3
"""Smoke test for the local control plane (no gpusched code involved).

    python -m tests.e2e.smoke_controlplane [--restart]

Starts LocalCluster, creates a kwok node with 8 nvidia.com/gpu, creates a pod
with ``schedulerName: nobody`` (so no scheduler touches it), binds it by hand
through pods/binding and waits until kwok reports it Running.  With
``--restart`` it also restarts the API server and checks the cluster still
works afterwards.  Prints timings; exit 0 on success.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.e2e.localcluster import GPU_RESOURCE, LocalCluster


def pod_manifest(name: str, gpus: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "smoke"}},
        "spec": {
            "schedulerName": "nobody",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/fake:latest",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(gpus)},
                        "limits": {GPU_RESOURCE: str(gpus)},
                    },
                }
            ],
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restart", action="store_true", help="also restart kube-apiserver mid-test")
    args = ap.parse_args()

    t_all = time.monotonic()
    timings: dict[str, float] = {}

    with LocalCluster() as c:
        timings["cluster start"] = c.timings["total"]
        print(f"cluster up: {c.server}  kubeconfig={c.kubeconfig}")
        print("component startup:", ", ".join(f"{k}={v:.2f}s" for k, v in c.timings.items()))
        print(c.kubectl("version").stdout.strip())

        t = time.monotonic()
        node = c.create_fake_node(
            "gpu-node-0",
            gpus=8,
            cpu="32",
            memory="256Gi",
            labels={"gpusched.io/gpu-model": "fake-a100"},
            annotations={"gpusched.io/smoke": "true"},
        )
        timings["node Ready"] = time.monotonic() - t
        alloc = node["status"]["allocatable"]
        assert alloc.get(GPU_RESOURCE) == "8", alloc
        print(f"node gpu-node-0 Ready, allocatable={alloc}")

        t = time.monotonic()
        c.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("smoke-0", 2))
        time.sleep(0.5)
        pod = c.get_pod("default", "smoke-0")
        assert pod["status"].get("phase") == "Pending", pod["status"]
        assert not pod["spec"].get("nodeName"), "nothing should have scheduled this pod"
        c.bind_pod("default", "smoke-0", "gpu-node-0")
        pod = c.wait_pod_phase("default", "smoke-0", "Running", timeout=60)
        timings["create+bind -> Running"] = time.monotonic() - t
        print(
            f"pod smoke-0 on {pod['spec']['nodeName']} phase={pod['status']['phase']} "
            f"podIP={pod['status'].get('podIP')}"
        )
        print(c.kubectl("get", "nodes,pods", "-o", "wide").stdout.rstrip())

        if args.restart:
            down = c.restart_apiserver()
            timings["apiserver restart"] = down
            # the cluster must still work end to end after the restart
            t = time.monotonic()
            c.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("smoke-1", 1))
            c.bind_pod("default", "smoke-1", "gpu-node-0")
            c.wait_pod_phase("default", "smoke-1", "Running", timeout=90)
            timings["after restart: create+bind -> Running"] = time.monotonic() - t
            c.wait_node_ready("gpu-node-0")
            c.check_processes()
            print("after apiserver restart: smoke-1 Running, node still Ready")

        t = time.monotonic()
        c.kubectl("delete", "pod", "--all", "-n", "default", "--wait=true", "--timeout=60s")
        timings["delete pods"] = time.monotonic() - t
        c.check_processes()

    timings["total (incl. teardown)"] = time.monotonic() - t_all
    print("timings:")
    for k, v in timings.items():
        print(f"  {k:<40} {v:6.2f}s")
    print("SMOKE OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
