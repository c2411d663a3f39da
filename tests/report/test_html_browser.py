"""report.html in a real browser: headless Chromium loads the page from its file, and the
H200's headline figures are in the rendered DOM, no console message appears and a screenshot
is not blank.

Marked `browser`: it needs a `chromium` binary (Debian's package). Without one it skips,
unless BWPROF_REQUIRE_BROWSER=1 (set by CI, which installs it), where a missing browser is a
failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.report.test_html import assert_self_contained

pytestmark = pytest.mark.browser

BROWSERS = ("chromium", "chromium-browser")
TIMEOUT_S = 120


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = "needs chromium (apt-get install chromium)"
    if os.environ.get("BWPROF_REQUIRE_BROWSER") == "1":
        pytest.fail(f"BWPROF_REQUIRE_BROWSER=1 but no browser is installed: {message}")
    pytest.skip(message)


def _chromium(browser: str, profile, *args: str) -> subprocess.CompletedProcess[str]:
    # A profile of its own: no state shared with another run; headless needs no display.
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def _console_messages(stderr: str) -> list[str]:
    """What the page said on its console (each message is logged as `INFO:CONSOLE`), and
    any uncaught exception."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.fixture
def h200_html(h200_page):
    return h200_page / "report.html"


def test_chromium_renders_the_h200_page_with_its_headline_figures(h200_html, tmp_path):
    browser = _browser()
    assert_self_contained(h200_html.read_text(encoding="utf-8"))
    done = _chromium(browser, tmp_path / "profile", "--dump-dom", h200_html.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # The figures as the page prints them: the GPU, hbm_triad and its peak, the PCIe links.
    for text in ("NVIDIA H200", "hbm_triad gpu0", ">4309<", "4814 (89%)", ">55.5<",
                 "hbm (hbm_triad)", "GPU-ee79134a-9732-1adc-01eb-364e22de051a"):
        assert text in dom, text
    assert _console_messages(done.stderr) == []


def test_a_screenshot_of_the_page_is_not_blank(h200_html, tmp_path):
    browser = _browser()
    from PIL import Image

    shot = tmp_path / "shot.png"
    done = _chromium(browser, tmp_path / "profile", f"--screenshot={shot}",
                     "--window-size=1200,2000", "--hide-scrollbars", h200_html.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    assert _console_messages(done.stderr) == []
    with Image.open(shot) as image:
        assert image.size == (1200, 2000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    # Text, table shading and the plots' lines: many colours, and no one colour covers all.
    assert len(colours) > 50
    assert max(count for count, _ in colours) < 0.95 * 1200 * 2000


def test_console_errors_are_seen(tmp_path):
    """The check above can fail: a page whose script throws shows on the console."""
    browser = _browser()
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>console.error('boom'); missing();</script>"
                    "</body></html>")
    done = _chromium(browser, tmp_path / "profile", "--dump-dom", page.as_uri())
    messages = _console_messages(done.stderr)
    assert any("boom" in m for m in messages) and any("Uncaught" in m for m in messages)
