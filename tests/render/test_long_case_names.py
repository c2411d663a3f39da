"""A 100,000-character case name (or unit, note, device) in a run folder's results.csv is cut
where it enters the plots, as the machine's names are (`bwprof.coerce.shorten`): drawn whole,
matplotlib laid out every glyph and `bwprof report --html` took 16-56 s. The run's files keep
it whole."""

from __future__ import annotations

import shutil

import pandas as pd
from matplotlib.text import Text

from bwprof.coerce import NAME_CHARACTERS
from bwprof.render import plots, timeline
from bwprof.saved import load
from tests.conftest import DATA

LONG = "T" * 100_000


def test_a_long_case_name_is_drawn_cut_and_kept_whole_in_the_files(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    shutil.copytree(DATA / "h200-quick", folder)
    results = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    results.loc[results["case"] == "hbm_triad", "case"] = LONG
    results.to_csv(folder / "results.csv", index=False)
    drawn = []

    def kept(figure, target, **_options):
        drawn.append(figure)
        return target

    for module in (plots, timeline):  # the figures as drawn, none laid out nor saved
        monkeypatch.setattr(module, "save_figure", kept)
        monkeypatch.setattr(module, "laid_out", lambda figure: figure)
    run = load(folder)
    plots.write_plots(run, tmp_path / "plots")
    texts = [text.get_text() for figure in drawn for text in figure.findobj(Text)]
    assert drawn and texts
    assert max(map(len, texts)) < 4 * NAME_CHARACTERS  # each label a plot's width at most
    assert sum(map(len, texts)) < 50_000  # the whole report's glyphs: well under the name's
    assert any("(100000 characters)" in text for text in texts)  # it says it was longer
    assert (run.results["case"] == LONG).sum() == 1  # the run keeps it whole
    assert LONG in (folder / "results.csv").read_text()


def test_cut_texts_cuts_only_long_texts_and_copies_only_then():
    frame = pd.DataFrame({"case": ["hbm_copy", LONG], "unit": ["GB/s", "U" * 5_000],
                          "note": [None, "n" * 200], "value_median": [1.0, 2.0],
                          "empty": [None, None]})
    cut = plots.cut_texts(frame)
    assert cut is not frame and frame["case"].iloc[1] == LONG  # the input is left whole
    assert cut["case"].iloc[0] == "hbm_copy" and cut["unit"].iloc[0] == "GB/s"
    assert all(len(cut[name].iloc[1]) <= NAME_CHARACTERS + 30 for name in ("case", "unit", "note"))
    assert "(100000 characters)" in cut["case"].iloc[1]
    assert cut["value_median"].tolist() == [1.0, 2.0] and pd.isna(cut["note"].iloc[0])
    short = frame.iloc[:1]
    assert plots.cut_texts(short) is short


def test_two_long_case_names_sharing_head_and_tail_stay_two_series():
    """Cut to head and tail alone, two such cases were drawn as one series (one label)."""
    one, two = "a" * 100 + "1" + "z" * 100, "a" * 100 + "2" + "z" * 100
    cut = plots.cut_texts(pd.DataFrame({"case": [one, two, one]}))["case"].tolist()
    assert cut[0] != cut[1] and cut[0] == cut[2]
    assert all(len(name) <= NAME_CHARACTERS + 30 for name in cut)
