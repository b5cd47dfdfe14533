"""benchmarks/write_cost.py: both clients write every request and the table says what each cost."""

from __future__ import annotations

import socket

import pytest

from benchmarks import write_cost


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_both_clients_are_measured_on_the_same_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert write_cost.main(["--requests", "40", "--in-flight", "8", "--rounds", "2", "--port", str(free_port())]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| aiohttp") or line.startswith("| http1")]
    assert len(rows) == 2 and out.count("round ") == 4
    for row in rows:
        median, rounds = row.split("|")[2:4]
        assert float(median) > 0 and len(rounds.split(",")) == 2
