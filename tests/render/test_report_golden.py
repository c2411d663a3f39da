"""`bwprof report --no-plots` of every stored run folder says what it said before the
renderer was made fast for fleets (issue 36): the same terminal lines and the same JSON
bytes, `--rows` included. The expectations were captured from the renderer before that
work (`python -m tests.render.report_golden tests/data/NAME tests/render/expected_report/NAME`);
a change meant to alter the report re-captures them in the same commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.render.report_golden import rendered

DATA = Path(__file__).resolve().parent.parent / "data"
EXPECTED = Path(__file__).resolve().parent / "expected_report"
FOLDERS = sorted(p.name for p in DATA.iterdir() if (p / "results.csv").is_file())


def test_every_stored_folder_has_expectations():
    assert FOLDERS and all((EXPECTED / f"{name}.json").is_file() for name in FOLDERS)


# Catches: a faster report_lines, json_records or json_ready that drops, reorders or
# re-spells a line, a cell or an escape
@pytest.mark.parametrize("name", FOLDERS)
def test_report_says_what_it_said(name):
    for kind, text in rendered(DATA / name).items():
        expected = (EXPECTED / f"{name}.{kind}").read_text(encoding="utf-8")
        assert text == expected, f"{name}.{kind} differs"
