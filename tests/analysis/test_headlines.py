"""A path's cases are named once, in the catalogue (`bwprof.casespec.PATHS`): the summary,
the verdicts, the roofline, the model and what renders them read them from there (issue 34).
A new GPU case that becomes a path's headline touches the catalogue entry and its function
(and their tests), not the summary, verdict or report modules."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pandas as pd
import pytest

import bwprof
from bwprof import casespec, saved
from bwprof.analysis.judge import judge_run
from bwprof.analysis.run import Run
from bwprof.analysis.spec import Spec
from bwprof.analysis.summary import build_summary, headline_sentence
from bwprof.casespec import path_of

PACKAGE = Path(bwprof.__file__).parent
SCANNED = ("analysis", "render")
BANDWIDTH_PATHS = ("ddr", "hbm", "d2d", "h2d", "d2h", "bidir", "p2p", "net")
DATA = Path(__file__).parents[1] / "data"

KNOWN_ELSEWHERE: dict[str, frozenset[str]] = {
    "render/plots.py": frozenset({"net_p2p", "p2p_copy"}),
    "render/terminal.py": frozenset({"p2p_copy"}),
    "render/html.py": frozenset({"p2p_copy"}),
}
"""Literals left for their module's owner to read from the catalogue (outside issue 34's
change of the analysis modules): the p2p matrix plot's title ('GPU→GPU copy (p2p_copy,
...)'), the network path's axis label ('rank→rank over MPI (net_p2p)'), the terminal's
GPU×GPU matrix heading ('GPU→GPU copy, GB/s median (p2p_copy, ...)') and the page's
(`P2P_CASE`). Remove an entry once its module names the case from `bwprof.casespec.path_of`
(`path_of("p2p").headline`)."""


def _path_case_keys() -> tuple[str, ...]:
    keys = {case for key in BANDWIDTH_PATHS for case in path_of(key).cases}
    return tuple(sorted(keys, key=len, reverse=True))


def _docstrings(tree: ast.AST) -> set[int]:
    """The docstring constants of a module, class or function: documentation, which may name
    today's cases (they say what the code reads), not text the code uses."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _spelled(source: str, pattern: re.Pattern[str]) -> list[tuple[int, str, str]]:
    """(line, key, text) for each string constant of `source` (an f-string's literal parts
    too: they are `ast.Constant`s inside its `ast.JoinedStr`) that is a case key or holds one
    as a whole word; docstrings left out."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docs):
            out += [(node.lineno, key, node.value) for key in pattern.findall(node.value)]
    return out


def _pattern(keys: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, keys)) + r")(?![A-Za-z0-9_])")


def test_the_scan_sees_plain_strings_and_f_string_parts_and_skips_docstrings():
    pattern = _pattern(("hbm_triad", "h2d_all"))
    source = ('"""hbm_triad in a docstring."""\n'
              'def f(x):\n'
              '    """h2d_all too."""\n'
              '    a = "hbm_triad"\n'
              '    b = f"{x} GB/s (h2d_all)"\n'
              '    c = "h2d_all_bidir hbm_triads"\n'  # neither is a whole word
              '    return a, b, c\n')
    assert [(line, key) for line, key, _ in _spelled(source, pattern)] == [
        (4, "hbm_triad"), (5, "h2d_all")]


def test_no_analysis_or_render_module_spells_a_paths_case():
    """Every case of a bandwidth path is read from the catalogue (`path_of(key).headline`,
    `.aggregate`, `.cases`), sentences shown to users included, so a changed headline
    changes every figure and sentence that names it."""
    keys = _path_case_keys()
    assert "hbm_triad" in keys and "h2d_all" in keys  # the scan looks for something
    pattern = _pattern(keys)
    found = []
    for folder in SCANNED:
        for module in sorted((PACKAGE / folder).rglob("*.py")):
            name = module.relative_to(PACKAGE).as_posix()
            allowed = KNOWN_ELSEWHERE.get(name, frozenset())
            found += [f"bwprof/{name}:{line}: {key} in {text!r}"
                      for line, key, text in _spelled(module.read_text(encoding="utf-8"), pattern)
                      if key not in allowed]
    assert not found, "case keys spelled out instead of read from casespec.PATHS:\n" + \
        "\n".join(found)


# -- a changed headline: the summary and the verdicts follow the catalogue ----------------

NEW_HEADLINE = "hbm_copy"


@pytest.fixture
def hbm_copy_headline(monkeypatch: pytest.MonkeyPatch) -> casespec.PathSpec:
    """The catalogue with hbm_copy ahead of hbm_triad as the HBM path's cases."""
    old = path_of("hbm")
    new = dataclasses.replace(old, cases=(NEW_HEADLINE, *old.cases))
    monkeypatch.setattr(casespec, "PATHS",
                        tuple(new if p.key == "hbm" else p for p in casespec.PATHS))
    monkeypatch.setitem(casespec.PATHS_BY_KEY, "hbm", new)
    assert path_of("hbm").headline == NEW_HEADLINE
    return new


@pytest.fixture
def run() -> Run:
    return saved.load(DATA / "h200-quick")


def _median(results: pd.DataFrame, case: str, column: str = "gbps_median") -> float:
    rows = results[(results["case"] == case) & (results["device"] == "gpu0")]
    assert len(rows) == 1
    return float(rows.iloc[0][column])


def test_summary_and_accept_follow_a_changed_hbm_headline(hbm_copy_headline, run):
    summary = build_summary(run.results)
    hbm = summary[summary["path"] == "hbm"]
    assert list(hbm["case"]) == [NEW_HEADLINE, "hbm_triad", "d2d_copy"]
    ratio = summary[summary["hbm_over_ddr"].notna() & (summary["metric"] == "bandwidth")]
    assert list(ratio["case"]) == [NEW_HEADLINE]  # the headline figure carries the ratios
    copy_gbps = _median(run.results, NEW_HEADLINE)
    assert float(ratio.iloc[0]["gbps"]) == pytest.approx(copy_gbps)
    ddr = float(summary.loc[summary["path"] == "ddr", "gbps"].iloc[0])
    assert float(ratio.iloc[0]["hbm_over_ddr"]) == pytest.approx(copy_gbps / ddr)
    sentence = headline_sentence(summary)
    assert f"{copy_gbps:.0f} GB/s ({NEW_HEADLINE}, gpu0" in sentence
    assert "hbm_triad" not in sentence
    checks = [c for c in judge_run(run, Spec()) if c.path == "hbm"]
    assert [(c.device, c.case) for c in checks] == [("gpu0", NEW_HEADLINE)]
    assert checks[0].value == pytest.approx(_median(run.results, NEW_HEADLINE, "value_median"))


def test_today_the_hbm_headline_is_hbm_triad(run):
    """The same figures from the catalogue as it is: what the patched one changes."""
    summary = build_summary(run.results)
    ratio = summary[summary["hbm_over_ddr"].notna() & (summary["metric"] == "bandwidth")]
    assert list(ratio["case"]) == ["hbm_triad"]
    assert [c.case for c in judge_run(run, Spec()) if c.path == "hbm"] == ["hbm_triad"]
    assert "(hbm_triad, gpu0" in headline_sentence(summary)


def test_a_path_names_its_every_gpu_case_from_its_cases():
    """The model's 'all GPUs at once' time reads the h2d path's aggregate, not a literal."""
    assert path_of("h2d").aggregate == "h2d_all" and path_of("d2h").aggregate == "d2h_all"
    assert path_of("hbm").aggregate == "" and path_of("ddr").aggregate == ""
    assert not any(key.endswith(casespec.AGGREGATE_SUFFIX) for key in (
        path_of(p).headline for p in BANDWIDTH_PATHS))  # a headline is per GPU
