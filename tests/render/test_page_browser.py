"""report.html as a reader sees it, in headless Chromium (marked `browser`): the H200 page on a
phone (400 px: the overall verdict, every path's verdict and every headline's status on
screen, nothing to scroll sideways to), on a desktop (1280 px: a results row is a line or
two, not a paragraph) and printed to A4 PDF (every flagged results row still shows its flag,
the overall verdict is on the first page).

One browser for all of it, driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: JSON messages ended by NUL on fds 3 and 4), so the page is
measured as laid out, at a width and for a medium the test chooses, with no driver package.
The PDF's text is read with pypdf (the `test` extra)."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bwprof import cli
from bwprof.analysis.answer import answer
from bwprof.render.html import verdict_rows
from bwprof.saved import load
from bwprof.schema.flags import split_flags
from tests.conftest import DATA
from tests.render.test_html import TIMEOUT_S, _browser

pytestmark = pytest.mark.browser

PHONE_PX = 400
DESKTOP_PX = 1280
A4_INCHES = (8.27, 11.69)
RESULTS_START = "Every row of results.csv"
RESULTS_END = "Column dictionary"


class DevTools:
    """Chromium driven over its DevTools pipe: one page target, commands answered in turn."""

    def __init__(self, browser: str, profile: Path) -> None:
        to_browser, from_test = os.pipe()
        to_test, from_browser = os.pipe()

        def pipes_on_3_and_4() -> None:  # in the child, before exec
            reading, writing = os.dup(to_browser), os.dup(from_browser)
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self.process = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=pipes_on_3_and_4)
        os.close(to_browser)
        os.close(from_browser)
        self._send = os.fdopen(from_test, "wb", buffering=0)
        self._receive = os.fdopen(to_test, "rb", buffering=0)
        self._buffer = b""
        self._id = 0
        self._events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        self.call("Page.enable", page=True)

    def _message(self) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._receive], [], [], left)[0]:
                raise TimeoutError(f"chromium said nothing for {TIMEOUT_S} s")
            chunk = self._receive.read(1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, page: bool = False, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if page:
            message["sessionId"] = self.session
        self._send.write(json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_for(self, event: str) -> None:
        while not any(e.get("method") == event for e in self._events):
            self._events.append(self._message())
        self._events = [e for e in self._events if e.get("method") != event]

    def open(self, url: str, width: int, mobile: bool) -> None:
        self.call("Emulation.setDeviceMetricsOverride", page=True, width=width, height=900,
                  deviceScaleFactor=1, mobile=mobile)
        self.call("Page.navigate", page=True, url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        found = self.call("Runtime.evaluate", page=True, expression=expression,
                          returnByValue=True)
        if "exceptionDetails" in found:
            raise RuntimeError(found["exceptionDetails"])
        return found["result"]["value"]

    def pdf(self) -> bytes:
        width, height = A4_INCHES
        found = self.call("Page.printToPDF", page=True, paperWidth=width, paperHeight=height,
                          printBackground=True, preferCSSPageSize=True)
        return base64.b64decode(found["data"])

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError):
            self.call("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._send.close()
        self._receive.close()


# What a reader must see, measured in the page: the box of each element that says a verdict
# or a status. The verdict and status columns are found by their headers, as a reader finds
# them, whatever the layout does with them.
SEEN = """(() => {
  const box = el => { const r = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    return {left: r.left, right: r.right, width: r.width, height: r.height,
            shown: style.visibility !== 'hidden' && style.display !== 'none',
            text: el.textContent.trim()}; };
  const column = (section, name) => {
    const table = document.querySelector(section + ' table');
    if (!table) return [];
    const index = [...table.querySelectorAll('thead th')]
      .findIndex(th => th.textContent.trim() === name);
    if (index < 0) return [];
    return [...table.querySelectorAll('tbody tr')]
      .filter(tr => tr.children.length > index).map(tr => box(tr.children[index]));
  };
  const answer = document.querySelector('#answer');
  const rows = [...document.querySelectorAll('#results tbody tr')];
  const cell = rows.length ? rows[0].querySelector('td') : null;
  const style = cell ? getComputedStyle(cell) : null;
  return {innerWidth, scrollWidth: document.documentElement.scrollWidth,
          pageHeight: document.documentElement.scrollHeight,
          answer: answer ? box(answer) : null,
          answerTop: answer ? answer.getBoundingClientRect().top + scrollY : null,
          verdicts: column('#verdict', 'verdict'), statuses: column('#summary', 'status'),
          rowHeights: rows.map(tr => tr.getBoundingClientRect().height),
          lineHeight: style ? (parseFloat(style.lineHeight) || 1.5 * parseFloat(style.fontSize))
                            : null};
})()"""


WIDE_PAGE = ('<html><head><meta name="viewport" content="width=device-width, initial-scale=1">'
             '</head><body><section id="verdict"><table><thead><tr>'
             '<th style="min-width:600px">figure</th><th>verdict</th></tr></thead>'
             "<tbody><tr><td>hbm</td><td>FAIL</td></tr></tbody></table></section></body></html>")
"""A page a phone must scroll sideways to read: its verdict is off-screen."""


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> dict[str, Any]:
    """The H200 page (`report --html`, plots and all) at 400 px, at 1280 px and as A4 PDF,
    and WIDE_PAGE at 400 px, from one browser."""
    browser = _browser()
    out = tmp_path_factory.mktemp("h200-page")
    assert cli.main(["report", str(DATA / "h200-quick"), "--html", "--out", str(out)]) == 0
    url = (out / "report.html").as_uri()
    wide = out / "wide.html"
    wide.write_text(WIDE_PAGE)
    tools = DevTools(browser, out / "profile")
    try:
        tools.open(url, PHONE_PX, mobile=True)
        phone = tools.evaluate(SEEN)
        tools.open(url, DESKTOP_PX, mobile=False)
        desktop = tools.evaluate(SEEN)
        pdf = tools.pdf()
        tools.open(wide.as_uri(), PHONE_PX, mobile=True)
        overflowing = tools.evaluate(SEEN)
    finally:
        tools.close()
    return {"phone": phone, "desktop": desktop, "pdf": pdf, "pages": None,
            "overflowing": overflowing}


def _within(box: dict[str, Any], width: int) -> bool:
    return (box["shown"] and box["width"] > 0 and box["height"] > 0
            and box["left"] >= -0.5 and box["right"] <= width + 0.5)


def test_on_a_phone_the_verdicts_are_on_screen_without_scrolling_sideways(seen):
    """At 400 px: no sideways scroll of the page, and the overall verdict, each path's
    verdict (the verdict table's verdict column) and each headline's status (the summary's
    status column) inside the screen's width, none hidden in a table that scrolls."""
    phone = seen["phone"]
    run = load(DATA / "h200-quick")
    assert phone["innerWidth"] == PHONE_PX
    assert phone["scrollWidth"] <= PHONE_PX
    assert phone["answer"] is not None and _within(phone["answer"], PHONE_PX), phone["answer"]
    assert answer(run).label in phone["answer"]["text"]
    verdicts = phone["verdicts"]
    assert len(verdicts) == len(verdict_rows(run))
    assert [v for v in verdicts if not _within(v, PHONE_PX)] == []
    assert {v["text"] for v in verdicts} >= {"PASS"}
    statuses = phone["statuses"]
    assert statuses and [s for s in statuses if not _within(s, PHONE_PX)] == []
    assert "waived" in {s["text"] for s in statuses}  # the H200 run's p2p_copy


def test_the_overall_verdict_comes_first(seen):
    """Above the box's identity and every table: within the first screen at either width."""
    for layout in ("phone", "desktop"):
        assert seen[layout]["answerTop"] is not None and seen[layout]["answerTop"] < 900


def test_on_a_desktop_a_results_row_is_a_line_or_two(seen):
    """At 1280 px a results row is at most about three lines of its text (the note wraps
    beside the figures, not under them), and the page is shorter than it was (20,700 px)."""
    desktop = seen["desktop"]
    heights = desktop["rowHeights"]
    assert len(heights) == len(load(DATA / "h200-quick").results)
    assert max(heights) <= 3.5 * desktop["lineHeight"], (max(heights), desktop["lineHeight"])
    assert desktop["scrollWidth"] <= DESKTOP_PX


def _pdf_text(seen: dict[str, Any]) -> list[str]:
    """The text of each printed page, read once (the plots' pages take seconds)."""
    pypdf = pytest.importorskip("pypdf", reason="needs pypdf (the test extra)")
    if seen["pages"] is None:
        reader = pypdf.PdfReader(io.BytesIO(seen["pdf"]))
        seen["pages"] = [page.extract_text() or "" for page in reader.pages]
    return seen["pages"]


def _squeezed(text: str) -> str:
    """Text without whitespace: a cell that wraps on paper reads the same."""
    return re.sub(r"\s+", "", text)


def test_printed_every_flagged_results_row_still_shows_its_flag(seen):
    """On A4 the results table keeps its flags column: each flag appears in the printed
    results at least once per row that has it, and d2d_copy at 16 MiB (in L2, above the
    HBM peak) shows l2_resident on its own row."""
    text = "\n".join(_pdf_text(seen))
    assert RESULTS_START in text and RESULTS_END in text
    printed = _squeezed(text.split(RESULTS_START, 1)[1].split(RESULTS_END, 1)[0])
    rows = load(DATA / "h200-quick").results
    flagged = [flag for cell in rows["flags"] for flag in split_flags(cell)]
    assert flagged  # the stored run has l2_resident and noisy rows
    for flag in set(flagged):
        assert printed.count(flag) >= flagged.count(flag), flag
    # d2d_copy's rows, in order: 64 KiB, 1 MiB, 16 MiB, 256 MiB; the 16 MiB one is flagged.
    row = printed.split(_squeezed("d2d_copy gpu0 within 16 MiB"), 1)[1].split("d2d_copy", 1)[0]
    assert "l2_resident" in row


def test_printed_the_overall_verdict_is_on_the_first_page(seen):
    run = load(DATA / "h200-quick")
    first = _pdf_text(seen)[0]
    assert "Overall verdict" in first and answer(run).label in first


def test_the_measure_sees_a_page_that_overflows(seen):
    """The measure above can fail: a page wider than the phone shows in scrollWidth, and a
    verdict cell pushed off-screen is outside the width."""
    found = seen["overflowing"]
    assert found["scrollWidth"] > PHONE_PX
    assert [v["text"] for v in found["verdicts"]] == ["FAIL"]
    assert not _within(found["verdicts"][0], PHONE_PX)
