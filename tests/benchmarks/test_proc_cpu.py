"""benchmarks/proc_cpu.py and the API server counters of benchmarks/e2e_throughput.py: where a run's CPU went."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import e2e_throughput, proc_cpu

linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc, which only Linux has")


@linux
def test_a_busy_child_is_found_and_its_cpu_counted_under_its_command() -> None:
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        before = proc_cpu.by_command([child.pid])
        deadline = time.monotonic() + 20
        while proc_cpu.cpu_seconds(child.pid) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in proc_cpu.descendants(os.getpid())
        assert os.getpid() not in proc_cpu.descendants(os.getpid())
        after = proc_cpu.by_command([child.pid])
        (name,) = after
        spent = proc_cpu.spent(before, after)
        assert 0.2 <= spent[name] <= 5.0
        assert proc_cpu.cpu_seconds(child.pid) >= 0.25
    finally:
        child.kill()
        child.wait()
    assert proc_cpu.cpu_seconds(child.pid) == 0.0  # gone: nothing to read


@linux
def test_a_reading_splits_control_plane_scheduler_and_harness() -> None:
    reading = proc_cpu.Reading()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    spent = reading.spent()
    assert spent["harness"] >= 0.15
    # The machine's busy time (/proc/stat, ticks charged per core) and a process's (/proc/PID/stat, its own cputime)
    # are two accountings of the same seconds: they differed by -0.02 to +0.02 s in 15 readings of this loop, one of
    # which failed the 0.02 s margin this had (0.19 against 0.21). Five ticks of margin; a machine reading that left
    # this process out would still be 0.2 s short.
    assert spent["machine"] >= spent["harness"] - 0.05
    assert set(proc_cpu.CONTROL_PLANE) <= set(spent)
    assert spent["control plane"] == pytest.approx(sum(spent[name] for name in proc_cpu.CONTROL_PLANE))


def test_the_api_servers_counters_are_summed_by_verb_resource_and_kind() -> None:
    throughput = e2e_throughput
    metrics = "\n".join(
        [
            "# HELP apiserver_request_total Counter of apiserver requests",
            'apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",'
            'scope="resource",subresource="binding",verb="POST",version="v1"} 5000',
            'apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",'
            'scope="resource",subresource="binding",verb="POST",version="v1"} 3',
            'apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="cluster",'
            'subresource="",verb="LIST",version="v1"} 12',
            'apiserver_watch_events_total{group="",kind="Pod",version="v1"} 17',
            'apiserver_request_duration_seconds_count{resource="pods",verb="LIST"} 99',
        ]
    )
    assert throughput.counters(metrics) == {"POST pods/binding": 5003.0, "LIST pods": 12.0, "watch events Pod": 17.0}


def test_the_cpu_table_gives_the_schedulers_cpu_to_its_last_event_per_pod_where_every_pod_had_one() -> None:
    """A scheduler writing its Events behind its bindings spends part of them after the last bind: the table shows
    its CPU until the last Event as well, and nothing where some pod never got one."""

    def result(case: str, to_events: float) -> e2e_throughput.Result:
        cpu = {"control plane": 4.0, "scheduler": 2.0, "harness": 0.5, "machine": 6.5}
        return e2e_throughput.Result(
            case=case,
            pods=1000,
            bound=1000,
            seconds=4.0,
            pods_per_s=250.0,
            p50_s=1.0,
            p99_s=2.0,
            cpu=cpu,
            scheduler_cpu_to_events=to_events,
        )

    rows = {
        line.split("|")[1].strip(): line
        for line in e2e_throughput.cpu_table({"late": result("late", 2.6), "short": result("short", 0.0)}).splitlines()
        if line.startswith("| late") or line.startswith("| short")
    }
    assert rows["late"].rstrip().endswith("| 2.00 | 0.50 | 1.62 | 0.00 | 2.60 |")
    assert rows["short"].rstrip().endswith("| 0.50 | 1.62 | 0.00 |  |")
