"""The README's Layout section matches the tree: every page of docs/ and every folder of examples/ is named."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^## Layout\n(.*?)^## ", text, re.S | re.M)
    assert found, "README.md has a Layout section"
    return found.group(1)


def test_the_layout_names_every_doc_page() -> None:
    layout = _layout()
    missing = [page.name for page in sorted((ROOT / "docs").glob("*.md")) if page.name not in layout]
    assert not missing, f"README.md's Layout leaves out docs/{', docs/'.join(missing)}"


def test_the_layout_names_every_example_folder() -> None:
    layout = _layout()
    folders = sorted(path.name for path in (ROOT / "examples").iterdir() if path.is_dir())
    missing = [name for name in folders if f"{name}/" not in layout]
    assert not missing, f"README.md's Layout leaves out examples/{', examples/'.join(missing)}"


def test_the_layout_names_every_top_level_folder_of_the_package() -> None:
    layout = _layout()
    packages = sorted(p.name for p in (ROOT / "scheduler").iterdir() if (p / "__init__.py").is_file())
    missing = [name for name in packages if f"  {name}/" not in layout]
    assert not missing, f"README.md's Layout leaves out scheduler/{', scheduler/'.join(missing)}"
