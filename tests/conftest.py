"""Settings every test module shares.

Hypothesis's per-example deadline (200 ms by default) is a timed assertion: on a loaded 2-core machine a property
test failed on it ("DeadlineExceeded") while its property held. Speed is shown by benchmarks, so no test has one.

structlog's loggers are never cached in tests: ``gpusched run`` configures them cached on first use
(``scheduler.k8s.logs.configure``), and once a test that starts it (tests/test_cli.py, tests/k8s/test_run.py) had
run, every module logger used after it kept that configuration, so a later test's ``structlog.testing.capture_logs``
captured nothing: tests/k8s/test_leader.py and test_discovery.py failed when run after those files and passed in the
suite's usual order.
"""

from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import settings

settings.register_profile("gpusched", deadline=None)
settings.load_profile("gpusched")


@pytest.fixture(autouse=True)
def _loggers_not_cached(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    configure = structlog.configure

    def uncached(**settings: Any) -> None:
        configure(**{**settings, "cache_logger_on_first_use": False})

    monkeypatch.setattr(structlog, "configure", uncached)
    yield
