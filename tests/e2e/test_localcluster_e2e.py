"""The suite's own control plane after an API server restart: kwok, the suite's kubelet, runs a pod made on a new
node just after it.

kwok drops a pod it reads while its cache of node Leases does not show it holding the pod's node, and reads that
pod again only when it changes; after a restart its Lease cache lags for seconds (client-go's backoff, longer
after restarts close together), so a node and a pod made then used to leave the pod Pending for good (12 of 24
pods here without ``LocalCluster._wait_kwok_back``; the snapshot test failed in CI so). ``restart_apiserver`` now
returns once kwok serves again.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.localcluster import LocalCluster, cached_binaries
from tests.e2e.skips import required

pytestmark = pytest.mark.e2e


def test_a_pod_on_a_node_made_after_each_of_several_api_server_restarts_runs() -> None:
    bin_dir = cached_binaries()
    if bin_dir is None and not required():
        pytest.skip("control-plane binaries not built (tests/e2e/build-controlplane.sh) and GPUSCHED_E2E_BIN unset")
    with LocalCluster(bin_dir=bin_dir, with_controller_manager=False) as c:
        made = []
        for restart in range(4):
            c.restart_apiserver(kill=True, downtime=2)
            for i in range(3):
                node = f"after-{restart}-{i}"
                c.create_fake_node(node, gpus=0, cpu="1", memory="1Gi")
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": node, "namespace": "default"},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                }
                c.request("POST", "/api/v1/namespaces/default/pods", pod)
                made.append(node)
        deadline = time.monotonic() + 60
        while True:
            phases = {p: c.get_pod("default", p)["status"].get("phase") for p in made}
            if all(ph == "Running" for ph in phases.values()) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert all(ph == "Running" for ph in phases.values()), f"pods not Running: {phases}"
