"""BENCHMARKS.md is a page of current results: one section per script in benchmarks/, short
enough to read, and every link into it from the README and docs/ lands on a heading."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "BENCHMARKS.md"
MAX_LINES = 520  # superseded runs live in git history (`git log -p -- BENCHMARKS.md`)
SECTION = re.compile(r"^## `(?P<name>[\w.]+\.py)`", re.MULTILINE)
LINK = re.compile(r"\]\((?:\.\./)?BENCHMARKS\.md#(?P<anchor>[^)\s]+)\)")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (and, for these headings, MkDocs' toc too):
    lower case, punctuation (backticks, dots, colons, commas, apostrophes) dropped, spaces
    to hyphens; hyphens and underscores kept."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def test_the_page_is_results_not_a_notebook() -> None:
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_LINES, (
        f"BENCHMARKS.md has {len(lines)} lines (at most {MAX_LINES}): keep the newest "
        "result of each script per machine; older runs stay in git history"
    )


def test_every_benchmark_script_has_one_section_and_every_section_a_script() -> None:
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    sections = SECTION.findall(PAGE.read_text(encoding="utf-8"))
    assert sorted(set(sections)) == sorted(sections), "a script has two sections"
    assert set(sections) == scripts, (
        f"without a section: {sorted(scripts - set(sections))}; "
        f"a section of no script: {sorted(set(sections) - scripts)}"
    )


def test_links_into_the_page_land_on_a_heading() -> None:
    headings = anchors(PAGE.read_text(encoding="utf-8"))
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    links = [
        (page.name, m["anchor"])
        for page in pages
        for m in LINK.finditer(page.read_text(encoding="utf-8"))
    ]
    assert links, "the README's results table links into BENCHMARKS.md"
    broken = [(name, anchor) for name, anchor in links if anchor not in headings]
    assert not broken, f"links to no heading of BENCHMARKS.md: {broken}"


def test_the_slug_is_githubs() -> None:
    assert github_slug("## `vs_peers.py`: beside Lightning's, Hugging Face's tuners"[3:]) == (
        "vs_peerspy-beside-lightnings-hugging-faces-tuners"
    )
    assert github_slug("`autotune search` with its defaults") == "autotune-search-with-its-defaults"
    assert anchors("# A b\ntext\n## `c.py`: d, e\n") == {"a-b", "cpy-d-e"}
