"""Health, readiness, leader and metrics endpoints as probes and Prometheus see them."""

from __future__ import annotations

import aiohttp

from scheduler.k8s import client as k8s
from scheduler.k8s import config as k8s_config
from scheduler.k8s.operator import Operator
from scheduler.k8s.serve import health


async def test_endpoints_follow_warm_up_and_leadership(client: k8s.Client) -> None:
    op = Operator(client, k8s_config.parse({}), identity="test")
    servers = await health.serve(op, health_port=0, metrics_port=0, host="127.0.0.1")
    base = f"http://127.0.0.1:{servers.health_port}"
    try:
        async with aiohttp.ClientSession() as http:

            async def get(url: str) -> tuple[int, str]:
                async with http.get(url) as r:
                    return r.status, await r.text()

            assert await get(base + "/healthz") == (200, "ok")
            assert (await get(base + "/readyz"))[0] == 503
            assert await get(base + "/leader") == (503, "standby")
            op.node_event({"metadata": {"name": "gpu-0"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
            op.listed()
            op.set_leading(True)
            assert (await get(base + "/readyz"))[0] == 200
            assert await get(base + "/leader") == (200, "leader")
            status, text = await get(f"http://127.0.0.1:{servers.metrics_port}/metrics")
    finally:
        await servers.close()
    assert status == 200
    for line in ("gpusched_is_leader 1.0", "gpusched_ready 1.0", 'gpusched_cluster_gpus{state="total"} 8.0'):
        assert line in text.splitlines()
    for name in (
        "gpusched_schedule_attempts_total",
        "gpusched_binds_total",
        "gpusched_bind_duration_seconds",
        "gpusched_e2e_scheduling_duration_seconds",
        "gpusched_pending_pods",
        "gpusched_pending_gangs",
    ):
        assert f"# TYPE {name} " in text


async def test_a_replica_refused_the_lease_is_not_ready_and_says_why(client: k8s.Client) -> None:
    op = Operator(client, k8s_config.parse({}), identity="test")
    refusal = ["namespace no-such-ns does not exist, so Lease no-such-ns/gpusched cannot be created"]
    op.lease_refusal = lambda: refusal[0]
    servers = await health.serve(op, health_port=0, metrics_port=0, host="127.0.0.1")
    base = f"http://127.0.0.1:{servers.health_port}"

    async def get(path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as http, http.get(base + path) as r:
            return r.status, await r.text()

    async def scrape() -> str:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{servers.metrics_port}/metrics") as r:
            return await r.text()

    try:
        op.listed()
        said = f"not leading and cannot lead: {refusal[0]}"
        assert await get("/readyz") == (503, said)
        assert await get("/leader") == (503, said)
        assert "gpusched_can_lead 0.0" in (await scrape()).splitlines()
        refusal[0] = ""  # the namespace was created: a standby that can lead is ready
        assert await get("/readyz") == (200, "ready")
        assert await get("/leader") == (503, "standby")
        assert "gpusched_can_lead 1.0" in (await scrape()).splitlines()
    finally:
        await servers.close()
