"""The operator's log set-up: what reaches the log and at which level."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

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
