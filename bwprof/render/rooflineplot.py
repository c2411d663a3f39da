"""The roofline drawn: `roofline.png`, from the ceilings `bwprof.analysis.roofline` works out.

Rendering only: the ceilings, ridge points and their text are the analysis module's; this
module turns them into a matplotlib figure (`matplotlib.figure.Figure`, no pyplot state) and
styles it with `figstyle`, so analysis never draws.
"""

from __future__ import annotations

from bwprof.analysis import roofline
from bwprof.render.figstyle import (
    TEXT_POINTS,
    WHITE_BOX,
    around,
    new_figure,
    place_clear,
    readable,
)

ROOFLINE_PNG = "roofline.png"
_MEMORY_STYLES = {"HBM": ("tab:blue", "-"), "L2": ("tab:cyan", "-."),
                  "host link": ("tab:purple", ":"), "DDR": ("tab:brown", "--")}


def roofline_figure(found: roofline.Ceilings, title: str, simulated_title: str):
    """A panel per device with a compute ceiling: log-log TFLOP/s against FLOP per byte, each
    measured bandwidth ceiling a slope, each compute ceiling a flat line, the ridge points
    against the device's own memory (HBM, or DDR for the host) marked; None without both a
    compute and a bandwidth ceiling. The ceilings and ridge points are `bwprof.analysis.roofline`'s;
    this draws them."""
    drawn = roofline.panels(found)
    if not drawn:
        return None
    figure = new_figure(6.5 * len(drawn), 5.2)
    simulated = False
    names: list[tuple[object, list]] = []
    for index, (device, compute, memories) in enumerate(drawn):
        axis = figure.add_subplot(1, len(drawn), index + 1)
        top = max(c.value for c in compute)
        bottom = min(c.value for c in compute)
        ridges = [roofline.ridge(c, m) for c in compute for m in memories]
        left, right = min(ridges) / 30, max(ridges) * 30
        xs = [left, right]
        for memory in memories:
            color, style = _MEMORY_STYLES.get(memory.label, ("gray", "-"))
            end = min(right, roofline.ridge(max(compute, key=lambda c: c.value), memory))
            axis.plot([left, end], [memory.value * left / 1e3, memory.value * end / 1e3],
                      color=color, linestyle=style, linewidth=1.6,
                      label=f"{memory.label} {memory.value:,.0f} GB/s ({memory.case})")
        primary = roofline.primary_memory(memories)
        mine: list = []
        names.append((axis, mine))
        for number, ceiling in enumerate(compute):
            color = f"C{number % 10}"
            axis.plot(xs, [ceiling.value] * 2, color=color, linewidth=1.2, alpha=0.85,
                      label=f"{ceiling.label} {ceiling.value:,.3g} TFLOP/s")
            point = roofline.ridge(ceiling, primary)
            axis.plot([point], [ceiling.value], marker="o", color=color, markersize=6)
            mine.append((roofline.intensity_text(point), around((point, ceiling.value)),
                         {"fontsize": TEXT_POINTS, "color": color,
                          # on white: the ceilings it sits among stay behind it
                          "bbox": WHITE_BOX}))
            simulated |= ceiling.simulated
        simulated |= any(m.simulated for m in memories)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlim(left, right)
        axis.set_ylim(min(bottom, min(m.value * left / 1e3 for m in memories)) * 0.8, top * 2.5)
        axis.set_xlabel("arithmetic intensity, FLOP per byte moved (log)")
        axis.set_ylabel("TFLOP/s (log)")
        axis.set_title(f"{device}: ridge points (o) against {primary.label}", fontsize=9)
        axis.grid(True, which="both", alpha=0.25)
        axis.legend(fontsize=TEXT_POINTS, loc="lower right")
    heading = f"Roofline from measured ceilings\n{title}"
    if simulated:
        heading += f"\n{simulated_title}"
    figure.suptitle(heading, fontsize=10, color="firebrick" if simulated else "black")
    readable(figure)
    for axis, labels in names:  # last: where the lines, markers and legend are is known
        place_clear(figure, axis, labels)
    return figure
