"""The operator's log set-up: what reaches the log and at which level."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog

from scheduler.k8s import logs


@pytest.fixture
def restored() -> Iterator[None]:
    """The root logger as it was before the test configured it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_request_kopf_retries_is_not_an_error_but_its_last_failure_is(
    restored: None, capfd: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json")  # here, not in a fixture: pytest puts its own handlers in place around the test body
    kopf_api = logging.getLogger("kopf._cogs.clients.api")
    # What kopf logged three times while the API server's storage initialised (then the request went through).
    kopf_api.error("Request attempt #1/9 failed; will retry: GET https://127.0.0.1:6443/apis -> APIServerError('x')")
    kopf_api.error("Request attempt #9/9 failed; escalating: GET https://127.0.0.1:6443/apis -> APIServerError('x')")
    logging.getLogger("gpusched.other").error("some other failure; will retry")  # not kopf's: kept as it is
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    assert [(line["level"], str(line["event"])[:28]) for line in lines] == [
        ("info", "Request attempt #1/9 failed;"),
        ("error", "Request attempt #9/9 failed;"),
        ("error", "some other failure; will ret"),
    ]


def test_the_operator_imports_no_rich_and_its_console_log_prints_a_plain_traceback() -> None:
    # structlog imports rich when it can (half of its import's CPU at every start); gpusched run's logs never use it.
    code = (
        "import logging, sys\n"
        "import scheduler.k8s.run\n"
        "print('RICH', 'rich' in sys.modules)\n"
        "from scheduler.k8s import logs\n"
        "logs.configure('console')\n"
        "try:\n"
        "    raise ValueError('the cause')\n"
        "except ValueError:\n"
        "    logging.getLogger('gpusched.test').exception('it failed')\n"
        "import rich\n"
        "print('IMPORTABLE', rich.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "RICH False" in done.stdout and "IMPORTABLE rich" in done.stdout
    assert "it failed" in done.stderr
    assert "Traceback (most recent call last):" in done.stderr and "ValueError: the cause" in done.stderr


def test_lines_of_two_threads_through_both_paths_are_written_whole_under_one_lock() -> None:
    # gpusched's own lines (structlog, StderrLogger) and the standard library's (kopf, aiohttp) share standard error;
    # a lease thread and the event loop write at once.
    code = (
        "import logging, threading\n"
        "import structlog\n"
        "from scheduler.k8s import logs\n"
        "logs.configure('json')\n"
        "own, theirs = structlog.get_logger('gpusched.own'), logging.getLogger('kopf.theirs')\n"
        "def write(n):\n"
        "    for i in range(2000):\n"
        "        own.info('own line', n=n, i=i, pad='x' * 300)\n"
        "        theirs.warning('their line %s %s %s', n, i, 'y' * 300)\n"
        "threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "assert logging.getLogger().handlers[0].lock is logs._WRITE_LOCK\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = done.stderr.splitlines()
    assert len(lines) == 8000
    parsed = [json.loads(line) for line in lines]
    assert sum(p["event"] == "own line" for p in parsed) == 4000
    assert sum(p["logger"] == "kopf.theirs" for p in parsed) == 4000


def test_a_json_line_holds_whatever_it_was_given(restored: None, capfd: pytest.CaptureFixture[str]) -> None:
    # orjson writes the lines; what it cannot write (an integer beyond 64 bits) is written all the same, an object
    # that is not JSON as its repr, keys that are not strings as strings.
    logs.configure("json")
    log = structlog.get_logger("gpusched.test")

    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    log.info("bound", pod="ns/p\u00e9", node="gpu-0", gpus=1, queue_s=0.25)
    log.info("huge", count=2**70, by_index={3: "three"}, thing=Opaque())
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    assert [line["event"] for line in lines] == ["bound", "huge"]
    assert (lines[0]["pod"], lines[0]["gpus"], lines[0]["queue_s"], lines[0]["level"]) == (
        "ns/p\u00e9",
        1,
        0.25,
        "info",
    )
    assert (lines[1]["count"], lines[1]["by_index"], lines[1]["thing"]) == (2**70, {"3": "three"}, "<opaque>")
