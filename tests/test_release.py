"""What a release says about itself agrees everywhere a user reads it: the licence (LICENSE and the package's
metadata), the version (``scheduler.__version__``, which pyproject.toml reads, ``gpusched --version`` prints,
the image tag in manifests/ and the newest release in CHANGELOG.md), and the image name every install
instruction tells users to replace (a name kustomize does not find changes nothing, silently)."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

import scheduler

ROOT = Path(__file__).resolve().parents[1]
#: sha256 of the Apache License 2.0 as the Apache Software Foundation publishes it
#: (www.apache.org/licenses/LICENSE-2.0.txt; Debian's /usr/share/common-licenses/Apache-2.0 is the same file).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _kustomization() -> dict[str, Any]:
    kustomization: dict[str, Any] = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    return kustomization


def _deployment_images() -> set[str]:
    deployment = yaml.safe_load((ROOT / "manifests" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    return {c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]}


def test_the_licence_is_the_apache_license_2_0_unaltered() -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256, "LICENSE is not the Apache License 2.0 verbatim"


def test_the_package_metadata_declares_the_licence() -> None:
    project = _project()
    assert project["license"] == "Apache-2.0"  # an SPDX expression (PEP 639): License-Expression in METADATA
    assert project["license-files"] == ["LICENSE"]  # shipped in the wheel's .dist-info/licenses/
    # PEP 639 replaces the "License ::" classifiers; setuptools refuses to build with both.
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]


def test_the_version_is_written_once_and_read_by_the_package() -> None:
    project = _project()
    assert "version" not in project and project["dynamic"] == ["version"]
    dynamic = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]
    assert dynamic["version"] == {"attr": "scheduler.__version__"}
    Version(scheduler.__version__)  # PEP 440, or pip and setuptools refuse it


def test_the_image_tag_is_the_package_version() -> None:
    images = _kustomization()["images"]
    assert len(images) == 1
    assert str(images[0]["newTag"]) == scheduler.__version__
    # The entry renames nothing: the base's image keeps the name overlays are told to replace.
    assert "newName" not in images[0]
    assert _deployment_images() == {images[0]["name"]}


def test_the_changelog_s_newest_release_is_the_package_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert headings[0] == ("Unreleased", ""), "Keep a Changelog: the Unreleased section comes first"
    version, date = headings[1]
    assert version == scheduler.__version__ and date, "the newest release heading is '## [VERSION] - YYYY-MM-DD'"


def test_every_documented_set_image_names_the_image_in_the_manifests() -> None:
    (image,) = _deployment_images()
    documents = [ROOT / "README.md", ROOT / "Makefile", *ROOT.glob("docs/*.md"), *ROOT.glob("examples/*/*")]
    commands = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in documents
        if path.is_file()
        for name in re.findall(r"kustomize edit set image ([^=\s`]+)=", path.read_text())
    }
    assert {where for where, _ in commands} >= {"README.md", "Makefile", "docs/operator.md"}
    assert [(where, name) for where, name in sorted(commands) if name != image] == []
