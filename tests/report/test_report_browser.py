"""The report in a real browser: headless Chromium (Debian's, /usr/bin/chromium; CI installs
it) opens the page offline, logs no console message (an error, or a blocked fetch: the
page's Content-Security-Policy forbids any), renders every section, and its screenshot is
not blank."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Searched

from autotune.report import write_report
from autotune.report.page import SECTIONS

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")


def _chromium() -> str:
    if CHROMIUM.exists():
        return str(CHROMIUM)
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("Chromium is not installed here (apt-get install chromium; CI installs it)")
    return found


def _open(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *extra,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _console(stderr: str) -> list[str]:
    """What the page said on the console (errors, blocked loads, uncaught exceptions)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def _pixel_spread(png: Path) -> float:
    from matplotlib.image import imread

    pixels = imread(str(png))
    return float(pixels[..., :3].std())


def test_the_console_check_catches_a_page_that_errs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><p>x</p><script>undefinedFn();</script>", encoding="utf-8")
    said = _console(_open(bad, tmp_path, "--dump-dom").stderr)
    assert any("undefinedFn" in line for line in said), said


def test_chromium_opens_the_report_with_no_console_message_and_a_real_picture(
    searched: Searched, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    page = tmp_path / "report.html"
    write_report(searched.preset, out=page)

    dom = _open(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == []
    ids = re.findall(r'<section id="([^"]+)">', dom.stdout)
    assert ids == [sid for sid, _ in SECTIONS]  # the browser parsed every section
    assert dom.stdout.count("<svg") == 5

    shot = tmp_path / "shot.png"
    taken = _open(
        page, tmp_path, "--hide-scrollbars", "--window-size=1100,2400", f"--screenshot={shot}"
    )
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    assert _console(taken.stderr) == []
    assert _pixel_spread(shot) > 0.05  # a blank (one-colour) page has 0
