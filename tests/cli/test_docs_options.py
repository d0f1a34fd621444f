"""The README and docs/*.md name only options that their command has: every `autotune CMD
--opt` written there (inline code, or a line of a code block with its continuations) is
an option of CMD in the Typer app, so a flag renamed or removed fails here with the page
and line. Read from the app itself; nothing runs."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from autotune.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```")
# a command line's tail: up to the end of an inline code span or a table cell
MENTION = re.compile(
    r"(?<![\w./-])autotune((?:\s+[a-z]+(?![\w./:-]))+)((?:(?!\bautotune\s)[^`|\n])*)"
)
OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Each line with its number; in a code block, a line ending in a backslash or followed
    by an indented `[--...` line is joined to what continues it, and `# comments` go."""
    in_code, held, held_at = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            if held:
                yield held_at, held
            in_code, held = not in_code, ""
            continue
        if not in_code:
            yield number, line
            continue
        code = line.split(" #", 1)[0].rstrip()
        if held and (held.endswith("\\") or re.match(r"\s+\[", code)):
            held = held.rstrip("\\") + " " + code.strip()
            continue
        if held:
            yield held_at, held
        held, held_at = code, number
    if held:
        yield held_at, held


def _mentions(page: Path) -> Iterator[tuple[str, list[str], str]]:
    """(page:line, the command's words, the option) for each option written after one."""
    for number, line in _lines(page.read_text(encoding="utf-8")):
        for match in MENTION.finditer(line):
            words = match.group(1).split()
            for option in OPTION.findall(match.group(2)):
                yield f"{page.relative_to(ROOT)}:{number}", words, option


@functools.cache
def _root() -> Any:
    return typer.main.get_command(app)


def _command(words: list[str]) -> tuple[Any, list[str]] | None:
    """The (sub)command the words name, and the words it takes; None when they name none.
    (Typer's commands are its own click's: told apart from a group by ``commands``.)"""
    command: Any = _root()
    path: list[str] = []
    for word in words:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command, path = sub, [*path, word]
    return (command, path) if path else None


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o[0] == "-"}


def test_the_pages_mention_commands_with_options() -> None:
    """The scan finds what it checks: the README's glance and the search page's options."""
    found = set()
    for _, words, option in (m for page in PAGES for m in _mentions(page)):
        named = _command(words)
        if named is not None:
            found.add((" ".join(named[1]), option))
    assert ("search", "--budget") in found
    assert ("train", "--on-oom") in found  # a continued line of the README
    assert ("presets export", "--nproc") in found
    assert len(found) >= 40


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_option_the_page_gives_a_command_is_one_of_its_own(page: Path) -> None:
    wrong = []
    for where, words, option in _mentions(page):
        found = _command(words)
        if found is None:
            continue
        command, path = found
        if option not in _options(command) | {"--help"}:
            wrong.append(f"{where}: autotune {' '.join(path)} has no {option}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_block_is_closed(page: Path) -> None:
    """An unclosed fence turns the rest of the page into code (its headings included)."""
    fences = [n for n, line in enumerate(page.read_text().splitlines(), 1) if FENCE.match(line)]
    assert len(fences) % 2 == 0, f"{page.name}: the fence at line {fences[-1]} is never closed"
