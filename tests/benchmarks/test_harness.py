"""benchmarks/harness.py: the tables the benchmarks print and the names their options take."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from benchmarks import harness


def test_a_table_aligns_figures_right_and_a_case_that_did_not_run_keeps_only_its_name_and_why() -> None:
    head = ["case", "pods", "pods/s", "note"]
    rows = [["gpusched", 20, "32.2", ""], harness.note_row("volcano", "not run: no binary", len(head))]
    assert harness.markdown_table(head, rows, align="lrrl").splitlines() == [
        "| case | pods | pods/s | note |",
        "|---|---:|---:|---|",
        "| gpusched | 20 | 32.2 | |",
        "| volcano | | | not run: no binary |",
    ]


def test_unknown_names_are_the_parsers_error_naming_them_and_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    assert harness.chosen(parser, " gpusched, ,kube-scheduler", ("kube-scheduler", "gpusched")) == [
        "gpusched",
        "kube-scheduler",
    ]
    with pytest.raises(SystemExit):
        harness.chosen(parser, "gpusched,volcano", ("kube-scheduler", "gpusched"))
    assert "unknown case(s) volcano; choose from kube-scheduler, gpusched" in capsys.readouterr().err


def test_the_trace_lists_named_are_taken_as_named() -> None:
    assert harness.trace_lists("default, multigpu40") == ["default", "multigpu40"]


def test_the_cli_runs_under_the_cpu_profile_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(harness.PROFILE_ENV, raising=False)
    assert harness.profiled_cli("first") is None
    monkeypatch.setenv(harness.PROFILE_ENV, str(tmp_path / "stacks"))
    command = harness.profiled_cli("first")
    assert command == [
        sys.executable,
        "-m",
        "benchmarks.cpu_profile",
        str(tmp_path / "stacks" / "first.stacks"),
        "scheduler.cli",
    ]
    assert (tmp_path / "stacks").is_dir()  # made, so that the profile can be written when the process stops


def test_a_checkouts_scheduler_package_is_byte_compiled_as_the_image_is_even_where_bytecode_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "scheduler"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "loop.py").write_text("ANSWER = 42\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    harness.byte_compile(tmp_path)
    tag = sys.implementation.cache_tag
    assert (package / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    assert (package / "core" / "__pycache__" / f"loop.{tag}.pyc").is_file()
    (package / "core" / "broken.py").write_text("def (:\n")
    with pytest.raises(RuntimeError, match=r"byte-compiling .*scheduler failed"):
        harness.byte_compile(tmp_path)
