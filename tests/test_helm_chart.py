"""charts/gpusched without Helm: its version is the package's, and its CRDs are the files of crds/ (Helm installs
them as they are). Helm's own checks (lint, template, install) are in tests/e2e/test_helm_chart_e2e.py."""

from __future__ import annotations

from pathlib import Path

import yaml

import scheduler

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "gpusched"


def test_the_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = scheduler.__version__  # pyproject.toml reads its version from there
    assert (chart["version"], chart["appVersion"]) == (package, package)


def test_the_chart_crds_are_the_files_of_crds() -> None:
    """Helm installs charts/gpusched/crds/ as they are: the same files as crds/, none missing, none extra."""
    shipped = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    charted = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert charted == shipped
