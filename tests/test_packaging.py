"""The operator image's pins (requirements.lock, installed with ``--no-deps`` by the Dockerfile) are exactly the
runtime dependencies' closure: a dependency added to pyproject.toml without its own dependencies in the lock
would import in the tests and fail in the image (CEL's did), and the simulator's plotting library stays out."""

from __future__ import annotations

import importlib.metadata as md
import platform
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
#: The environment markers are evaluated for the image's platform: CPython 3.11 on Linux.
ENVIRONMENT = {
    "extra": "",
    "python_version": f"{sys.version_info.major}.{sys.version_info.minor}",
    "python_full_version": platform.python_version(),
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "implementation_name": "cpython",
}


def _closure(names: list[str]) -> set[str]:
    seen: set[str] = set()
    stack = [canonicalize_name(n) for n in names]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for raw in md.requires(name) or []:
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate(ENVIRONMENT):
                stack.append(canonicalize_name(requirement.name))
    return seen


def _locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_the_runtime_closure_and_nothing_else() -> None:
    runtime = [Requirement(r).name for r in md.requires("gpusched") or [] if "extra ==" not in r]
    assert "matplotlib" not in runtime  # the `plots` extra, not the operator's
    assert "scipy" not in runtime  # the `sim` extra (the bound's solver), not the operator's
    needed = _closure(runtime) - {"gpusched"}
    locked = _locked()
    assert sorted(needed - set(locked)) == [], "missing from requirements.lock"
    assert sorted(set(locked) - needed) == [], "pinned but not needed by gpusched run"
