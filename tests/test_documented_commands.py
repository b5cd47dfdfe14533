"""Every ``gpusched COMMAND --option`` the README and docs/ show as code is an option ``gpusched COMMAND --help``
lists: a reader who copies a documented command line gets it run, not ``unrecognized arguments``.

The commands are read from fenced code blocks, from indented lines that start with the command (the way
docs/performance.md shows one), continuation lines (a trailing backslash) joined, and from inline code in the
text; an option counts up to the end of the shell command (a comment, a pipe, ``&&``, ``;`` or a redirection).
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from scheduler import cli

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: The commands with options of their own; ``bench`` has one subcommand with options, ``kernels``.
COMMANDS = ("run", "dashboard", "explain", "simulate", "trace", "bench kernels", "node-topology")

_COMMAND = re.compile(r"(?<![\w./-])(?:\S*/)?gpusched\s+(" + "|".join(re.escape(c) for c in COMMANDS) + r")(?![\w-])")
_END = re.compile(r"\s(?:#|\||&&|;|>|2>)")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line inside a fenced block, and of indented lines that run gpusched."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or re.match(r"    \s*(\S*/)?gpusched ", line):
            yield number, line


def _commands(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, command, the rest of the shell command) of every documented gpusched command line."""
    pending: list[str] = []
    first = 0
    for number, line in _code_lines(text):
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        joined = " ".join([*pending, line])
        pending = []
        for found in _COMMAND.finditer(joined):
            rest = joined[found.end() :]
            end = _END.search(rest)
            yield first, found.group(1), rest[: end.start()] if end else rest


def _inline(text: str) -> Iterator[tuple[int, str, str]]:
    """The same from inline code (`...`, which may wrap onto the next line but not cross a paragraph)."""
    for span in re.finditer(r"(?<!`)`((?:[^`\n]|\n(?!\s*\n))+)`(?!`)", text):
        number = text.count("\n", 0, span.start()) + 1
        joined = " ".join(span.group(1).split())
        for found in _COMMAND.finditer(joined):
            rest = joined[found.end() :]
            end = _END.search(rest)
            yield number, found.group(1), rest[: end.start()] if end else rest


def documented() -> list[tuple[str, str, str]]:
    """(where, command, option) for every option of a documented gpusched command; where names every place."""
    places: dict[tuple[str, str], list[str]] = {}
    for path in DOCUMENTS:
        text = path.read_text()
        for number, command, rest in [*_commands(text), *_inline(text)]:
            for option in _OPTION.findall(rest):
                places.setdefault((command, option), []).append(f"{path.relative_to(ROOT)}:{number}")
    return [(", ".join(sorted(set(where))), command, option) for (command, option), where in places.items()]


@cache
def help_text(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([*command.split(), "--help"])
    return out.getvalue()


def test_the_docs_show_commands_with_options() -> None:
    # The reader below finds what it should: if it found nothing, the test after it would pass for nothing.
    commands = {command for _, command, _ in documented()}
    assert {"run", "simulate", "explain", "bench kernels"} <= commands


@pytest.mark.parametrize(("where", "command", "option"), documented(), ids=lambda v: str(v).split(", ")[0])
def test_each_documented_option_is_in_the_help(where: str, command: str, option: str) -> None:
    assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text(command)), (
        f"{where}: `gpusched {command} {option}` is documented but `gpusched {command} --help` does not list it"
    )


def test_the_reader_joins_continuations_and_stops_at_the_shell_command_s_end() -> None:
    text = "```\n.venv/bin/gpusched simulate --seeds 1-2 \\\n    --json x.json | tee out  # --not-an-option\n```\n"
    assert [(c, _OPTION.findall(rest)) for _, c, rest in _commands(text)] == [("simulate", ["--seeds", "--json"])]
