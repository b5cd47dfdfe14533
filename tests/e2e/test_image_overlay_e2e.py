"""The install instructions for an image of one's own, rendered by kubectl's kustomize as a user's apply would:
the overlay in examples/registry-overlay, and the overlay docs/operator.md's ``kustomize edit set image`` command
writes, each change the image of the Deployment's every container; the base names the package's version.

The docs once said ``kustomize edit set image gpusched=...``, which matched no image once the base had renamed
it, so the overlay rendered the unpublished ghcr image and nothing said so. Rendering needs no API server, only
the kubectl the suite builds (tests/e2e/build-controlplane.sh)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import scheduler
from tests.e2e.localcluster import cached_binaries
from tests.e2e.skips import skip_or_fail

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kubectl() -> Path:
    bin_dir = cached_binaries()
    if bin_dir is None or not os.access(bin_dir / "kubectl", os.X_OK):
        skip_or_fail(
            "no kubectl from tests/e2e/build-controlplane.sh to render the overlays with (set GPUSCHED_E2E_BIN, "
            "or build the control plane: 10-20 min, needs Go)"
        )
    return bin_dir / "kubectl"


def _deployment_images(kubectl: Path, directory: Path) -> set[str]:
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    deployments: list[dict[str, Any]] = [
        doc for doc in yaml.safe_load_all(rendered.stdout) if doc and doc["kind"] == "Deployment"
    ]
    assert [d["metadata"]["name"] for d in deployments] == ["gpusched"]
    pod = deployments[0]["spec"]["template"]["spec"]
    return {c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]}


def test_the_base_runs_the_image_of_the_package_version(kubectl: Path) -> None:
    assert _deployment_images(kubectl, ROOT / "manifests") == {f"ghcr.io/gpusched/gpusched:{scheduler.__version__}"}


def test_the_example_overlay_runs_the_image_it_names(kubectl: Path) -> None:
    overlay = ROOT / "examples" / "registry-overlay"
    (entry,) = yaml.safe_load((overlay / "kustomization.yaml").read_text())["images"]
    assert _deployment_images(kubectl, overlay) == {f"{entry['newName']}:{entry['newTag']}"}


def test_the_documented_set_image_command_changes_the_image(kubectl: Path, tmp_path: Path) -> None:
    docs = (ROOT / "docs" / "operator.md").read_text()
    commands = re.findall(r"kustomize edit set image (\S+)=REGISTRY/gpusched:TAG", docs)
    assert commands, "docs/operator.md shows the kustomize edit set image command"
    for name in set(commands):
        # What `kustomize create --resources BASE` and `kustomize edit set image NAME=REF:TAG` write.
        overlay = tmp_path / "overlays" / "prod"
        overlay.mkdir(parents=True, exist_ok=True)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            # kustomize refuses absolute paths to a base.
            "resources": [os.path.relpath(ROOT / "manifests", overlay)],
            "images": [{"name": name, "newName": "registry.example.com/team/gpusched", "newTag": "1.2.3"}],
        }
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        assert _deployment_images(kubectl, overlay) == {"registry.example.com/team/gpusched:1.2.3"}, name
