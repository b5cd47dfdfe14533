"""The README's front page stays a front page (short, a picture that is there, the two commands), its Layout
section matches the tree (every page of docs/ and every folder of examples/ is named), and docs/index.md names
every page of docs/."""

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


def _front() -> str:
    """What the README says before its first section: the screen a visitor sees first."""
    text = (ROOT / "README.md").read_text()
    return text[: text.index("\n## ")]


def test_the_front_page_fits_a_screen_with_the_two_commands() -> None:
    front = _front()
    assert len(front.splitlines()) <= 25, "the README's first screen is short: move details to a section or docs/"
    assert "make demo " in front and "make test " in front


def test_the_front_page_picture_is_in_the_tree_and_small() -> None:
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", _front())
    assert pictures, "the README's first screen shows a picture"
    for picture in pictures:
        path = ROOT / picture
        assert path.is_file(), f"README.md shows {picture}, which is not in the tree"
        assert path.stat().st_size < 200_000, f"{picture} is over 200 KB"


def test_the_index_names_every_doc_page_with_a_link() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    pages = sorted(page.name for page in (ROOT / "docs").glob("*.md") if page.name != "index.md")
    missing = [name for name in pages if f"]({name})" not in index]
    assert not missing, f"docs/index.md leaves out {', '.join(missing)}"
