"""What drawing the plots costs (issue 36): each figure is drawn once, on one layout solve,
with no artist that costs more than what it shows."""

import math

from bwprof.render import plots
from bwprof.saved import load
from tests.conftest import DATA


def _count_draws(monkeypatch) -> list[str]:
    from matplotlib.figure import Figure

    draws: list[str] = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw",
                        lambda figure, renderer: draws.append("draw") or real(figure, renderer))
    return draws


# Catches: savefig of a figure still holding its layout engine drew the whole figure once
# without pixels to lay it out, then again for the PNG: every plot but the labelled ones cost
# two draw passes and a solve (issue 36)
def test_each_plot_is_drawn_once_on_one_layout_solve(run_copy, monkeypatch, layout_solves):
    draws = _count_draws(monkeypatch)
    written = plots.write_plots(load(run_copy("h200-quick")))
    assert len(written) == 8  # bandwidth, summary, telemetry and five timelines
    assert len(draws) == len(written)
    assert len(layout_solves) == len(written)


# Catches: each case's name above the telemetry was an annotation with an arrow, clipped to
# its text's box by a bezier search at every draw: a third of the figure's cost (issue 36)
def test_telemetry_names_each_case_over_one_line_of_leaders():
    from matplotlib.text import Annotation

    run = load(DATA / "h200-quick")
    figure = plots.telemetry_figure(run.samples, run.meta, results=run.results)
    top = figure.axes[0]
    names = [t for t in top.texts if isinstance(t, Annotation)]
    assert len(names) == len(plots._case_spans(run.samples)) > 10
    assert all(name.arrow_patch is None for name in names)
    (leaders,) = [line for line in top.get_lines() if line.get_transform() == top.transAxes]
    xs, ys = leaders.get_xdata(), leaders.get_ydata()
    segments = [(xs[k:k + 2], ys[k:k + 2]) for k in range(0, len(xs), 3)]
    assert len(segments) == len(names)
    low, high = top.get_xlim()
    for (case, start, end), name, (x, y) in zip(plots._case_spans(run.samples), names,
                                                 segments, strict=True):
        assert name.get_text() == case
        assert x[0] == ((start + end) / 2 - low) / (high - low)  # the middle of its span
        assert x[1] == name.xy[0] and list(y) == [1.0, plots.SPAN_LEADER_TOP]
    assert all(math.isnan(x) for x in xs[2::3])


# Catches: each timeline panel filtered every row of results.csv twice for its reference bar
# (once for the figure's height, once to draw it)
def test_each_timeline_panel_looks_up_its_parts_once(monkeypatch):
    from bwprof.render import timeline

    run = load(DATA / "h200-quick")
    entries = timeline.read_timelines(DATA / "h200-quick")
    calls: list[str] = []
    real = timeline.alone_parts
    monkeypatch.setattr(timeline, "alone_parts",
                        lambda results, entry: calls.append(entry["case"])
                        or real(results, entry))
    timeline.timeline_figures(entries, "vm", "H200", run.results)
    assert len(calls) == len(entries)
