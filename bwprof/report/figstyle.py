"""What every bwprof figure shares: how it is made (a `matplotlib.figure.Figure`, no pyplot
state, so plotting is safe from a library) and the least text size, so each PNG reads at
100% zoom and each figure embedded in a page (SVG) reads as printed."""

from __future__ import annotations

from typing import Any

DPI = 100
MIN_POINTS = 8.0
"""The smallest text any figure holds, in points (at 100 dpi, 11 px: readable unzoomed)."""
TEXT_POINTS = 8
LABEL_POINTS = 9
PANEL_TITLE_POINTS = 10


def new_figure(width: float, height: float) -> Any:
    """A figure of `width` x `height` inches at DPI, laid out by matplotlib's constrained
    layout (labels, legends and titles kept inside the canvas)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def readable(figure: Any) -> Any:
    """Raise every text of `figure` smaller than MIN_POINTS to it (a safety net beneath the
    sizes each plot chooses); returns the figure."""
    from matplotlib.text import Text

    for text in figure.findobj(Text):
        if text.get_fontsize() < MIN_POINTS:
            text.set_fontsize(MIN_POINTS)
    return figure


def smallest_text(figure: Any) -> float:
    """The smallest size of any visible, non-empty text in `figure`, in points (for tests)."""
    from matplotlib.text import Text

    sizes = [float(t.get_fontsize()) for t in figure.findobj(Text)
             if t.get_visible() and t.get_text()]
    return min(sizes) if sizes else MIN_POINTS
