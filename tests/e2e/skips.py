"""What an end-to-end test does when something it needs is missing (binaries, ``gpusched run``, a build that
failed): skip with the reason, or, when CI says the suite must run (``GPUSCHED_E2E_REQUIRED=1``), fail with it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import NoReturn

import pytest

HERE = Path(__file__).resolve().parent


def required() -> bool:
    """CI says the suite must run: nothing may skip for want of binaries or of ``gpusched run``."""
    return os.environ.get("GPUSCHED_E2E_REQUIRED", "") not in ("", "0")


def skip_or_fail(reason: str) -> NoReturn:
    if required():
        pytest.fail(f"GPUSCHED_E2E_REQUIRED=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def made_by(script: Path, *, failed: str, timeout: float) -> Path:
    """The path ``script`` (one of the suite's build or fetch scripts) prints last: what it found in its cache, or
    made. When it fails (``failed`` says what that means) or cannot run, the test skips, or fails under
    ``GPUSCHED_E2E_REQUIRED=1``."""
    started = time.monotonic()
    try:
        out = subprocess.run([str(script)], capture_output=True, text=True, check=True, timeout=timeout)
    except subprocess.CalledProcessError as exc:
        skip_or_fail(f"{script.name} {failed}: {exc.stderr.strip()[-2000:]}")
    except (subprocess.TimeoutExpired, OSError) as exc:
        skip_or_fail(f"{script.name} did not run: {exc!r}")
    if "building" in out.stderr:
        print(f"\n[e2e] {script.name} built {out.stdout.strip().splitlines()[-1]} in {time.monotonic() - started:.0f}s")
    return Path(out.stdout.strip().splitlines()[-1])


def helm() -> Path:
    """The Helm binary: ``GPUSCHED_HELM``, else what build-helm.sh finds in its cache or builds from
    ``helm.sh/helm/v4`` (a few minutes from a cold Go build cache). Without it (no Go, a failed build) the test
    skips with the reason, or fails under ``GPUSCHED_E2E_REQUIRED=1``."""
    given = os.environ.get("GPUSCHED_HELM", "")
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            skip_or_fail(f"GPUSCHED_HELM={given} is not an executable file")
        return path
    return made_by(HERE / "build-helm.sh", failed="could not build Helm from helm.sh/helm/v4", timeout=1800)


def prometheus() -> Path:
    """The directory holding Debian's ``prometheus`` and ``promtool``: ``GPUSCHED_PROMETHEUS``, else what
    build-prometheus.sh finds in its cache or fetches (seconds: ``apt-get download`` and ``dpkg-deb -x``). Without
    it (no apt, a package list without ``prometheus``) the test skips with the reason, or fails under
    ``GPUSCHED_E2E_REQUIRED=1``."""
    given = os.environ.get("GPUSCHED_PROMETHEUS", "")
    if given:
        path = Path(given)
        if not all(os.access(path / tool, os.X_OK) for tool in ("prometheus", "promtool")):
            skip_or_fail(f"GPUSCHED_PROMETHEUS={given} holds no executable prometheus and promtool")
        return path
    return made_by(HERE / "build-prometheus.sh", failed="could not fetch Debian's prometheus package", timeout=600)
