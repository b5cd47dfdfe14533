"""The suite's wait (kube.wait_until) waits out what waiting can clear and surfaces a predicate's own bug at once.
No cluster needed."""

from __future__ import annotations

import urllib.error
from collections.abc import Callable

import pytest

from tests.e2e.kube import WaitTimeout, wait_until
from tests.e2e.localcluster import APIError


def flaky(*failures: BaseException) -> tuple[list[int], Callable[[], str]]:
    """A predicate that raises ``failures`` in turn, then returns "done"; and its call count."""
    calls = [0]

    def predicate() -> str:
        calls[0] += 1
        if calls[0] <= len(failures):
            raise failures[calls[0] - 1]
        return "done"

    return calls, predicate


def test_not_found_and_an_unreachable_server_are_waited_out() -> None:
    calls, predicate = flaky(
        APIError("GET", "/api/v1/namespaces/ns/pods/p", 404, "not found"),
        APIError("GET", "/api/v1/namespaces/ns/pods/p", 503, "the API server restarts"),
        urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
    )
    assert wait_until(predicate, timeout=30, what="p", interval=0.01) == "done"
    assert calls == [4]


@pytest.mark.parametrize(
    "bug",
    [KeyError("status"), TypeError("'NoneType' object is not subscriptable"), APIError("GET", "/x", 400, "bad")],
)
def test_a_predicates_own_error_surfaces_at_once(bug: BaseException) -> None:
    # Before, it was kept as "last error" and raised as a WaitTimeout only when the 60 s were over.
    calls, predicate = flaky(bug)
    with pytest.raises(type(bug)):
        wait_until(predicate, timeout=60, what="p", interval=0.01)
    assert calls == [1]


def test_the_timeout_names_what_was_awaited_the_state_and_the_last_error() -> None:
    def never() -> None:
        raise APIError("GET", "/api/v1/nodes/n1", 404, "nodes n1 not found")

    with pytest.raises(WaitTimeout) as caught:
        wait_until(never, timeout=0.05, what="node n1 Ready", describe=lambda: "no node", interval=0.01)
    message = str(caught.value)
    assert "waiting for node n1 Ready" in message and "state: no node" in message and "HTTP 404" in message
