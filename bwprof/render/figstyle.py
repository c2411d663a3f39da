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


Candidate = tuple[tuple[float, float], tuple[float, float], str, str]
"""Where a label may go: (anchor xy, offset in points, ha, va)."""
WHITE_BOX = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
             "alpha": 0.9}
"""Behind a label no clear place was found for, so the lines under it do not cross it."""
RING_POINTS = (5.0, 11.0, 18.0, 28.0)
"""How far from its point a point label is tried, in points, nearest first."""


def around(xy: tuple[float, float]) -> list[Candidate]:
    """The places around a point a label is tried at: the four diagonals, nearest first."""
    places: list[Candidate] = []
    for step in RING_POINTS:
        for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
            places.append((xy, (dx * step, dy * step), "left" if dx > 0 else "right",
                           "bottom" if dy > 0 else "top"))
    return places


def _renderer(figure: Any) -> Any:
    """A renderer of `figure` laid out as it will be drawn (where every axis and legend
    is): the layout engine solved, nothing drawn (a draw pass without pixels cost as much
    as the solve again; the positions are the same). The layout is then kept as it is (no
    engine at all): labels placed against it must not move with a later solve, and saving
    the figure draws it once (savefig draws a figure with any engine, even matplotlib's
    placeholder for 'none', a first time without pixels to lay it out)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) \
        else FigureCanvasAgg(figure)
    engine = figure.get_layout_engine()
    if engine is not None:
        if figure.axes:  # as Figure.draw would, without drawing (a placeholder: nothing)
            engine.execute(figure)
        # None, whatever a matplotlibrc asks of new figures (figure.autolayout would make
        # it 'tight': another solve at every save, moving the labels placed).
        with matplotlib.rc_context({"figure.autolayout": False,
                                    "figure.constrained_layout.use": False}):
            figure.set_layout_engine(None)
    return canvas.get_renderer()


def laid_out(figure: Any) -> Any:
    """`figure` with its layout solved once and kept (`_renderer`); returns it. Saving it
    then draws it once: matplotlib's savefig, given a figure whose layout engine is still
    set, first draws the whole figure without pixels to lay it out, then again to render."""
    _renderer(figure)
    return figure


def _obstacles(axis: Any) -> tuple[list[Any], list[tuple[float, float, float]]]:
    """The data an axis draws, in display space: each line's path and each marker as a
    circle (x, y, radius)."""
    paths, marks = [], []
    for line in axis.get_lines():
        if not line.get_visible():
            continue
        path = line.get_transform().transform_path(line.get_path())
        if line.get_linestyle() not in ("None", "none", " ", ""):
            paths.append(path)
        if line.get_marker() not in (None, "None", "none", "", " "):
            radius = line.get_markersize() / 2 * axis.figure.dpi / 72 + 1
            marks += [(float(x), float(y), radius) for x, y in path.vertices]
    return paths, marks


def collides(box: Any, paths: list[Any], marks: list[tuple[float, float, float]],
             boxes: list[Any]) -> bool:
    """Whether a text's display box meets a line, a marker or another box."""
    if any(box.overlaps(other) for other in boxes):
        return True
    for x, y, radius in marks:
        nearest_x, nearest_y = min(max(x, box.x0), box.x1), min(max(y, box.y0), box.y1)
        if (nearest_x - x) ** 2 + (nearest_y - y) ** 2 < radius ** 2:
            return True
    return any(path.intersects_bbox(box, filled=False) for path in paths)


def place_clear(figure: Any, axis: Any, labels: list[tuple[str, list[Candidate], dict]]) -> list:
    """Annotate `axis` with each (text, candidate places, text options), each at the first
    place clear of the axis's lines, markers, legend and the labels placed before it and
    inside its frame, so no label is overprinted; where no place is clear, the first place,
    on a white box. Call it last: it solves the figure's final layout and keeps it."""
    renderer = _renderer(figure)
    frame = axis.get_window_extent(renderer)
    paths, marks = _obstacles(axis)
    legend = axis.get_legend()
    boxes = [legend.get_window_extent(renderer)] if legend is not None else []
    placed = []
    for text, candidates, options in labels:
        chosen = None
        for xy, offset, ha, va in candidates:
            note = axis.annotate(text, xy, xytext=offset, textcoords="offset points",
                                 ha=ha, va=va, **options)
            box = note.get_window_extent(renderer).padded(1)
            inside = (frame.x0 <= box.x0 and box.x1 <= frame.x1
                      and frame.y0 <= box.y0 and box.y1 <= frame.y1)
            if inside and not collides(box, paths, marks, boxes):
                chosen = note
                break
            note.remove()
        if chosen is None:
            xy, offset, ha, va = candidates[0]
            chosen = axis.annotate(text, xy, xytext=offset, textcoords="offset points",
                                   ha=ha, va=va, **{"bbox": WHITE_BOX, **options})
        boxes.append(chosen.get_window_extent(renderer).padded(1))
        placed.append(chosen)
    return placed
