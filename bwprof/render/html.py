"""`report.html`: one self-contained page of a run that a reviewer can attach to a ticket.

The box's identity, the verdict section, the summary beside peak, the findings, every plot
(inline: SVG, or PNG where the SVG would be large), the results table and the column
dictionary, rendered by Jinja2 from `templates/report.html.j2` with autoescape on: every
string from a run folder is untrusted. Nothing is fetched: no script, no font, no `http(s)://`
resource; the page needs no JavaScript and has print and narrow-screen styles.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from markupsafe import Markup, escape

from bwprof._version import __version__
from bwprof.render.terminal import report_lines, summary_grid
from bwprof.schema.columns import groups
from bwprof.schema.flags import FLAGS
from bwprof.schema.rows import CSV_COLUMNS
from bwprof.schema.text import printable
from bwprof.store.atomic import Picture, atomic_file
from bwprof.store.formats import cell_float, cell_int, is_missing
from bwprof.units import format_bytes

if TYPE_CHECKING:
    from bwprof.analysis.run import Run

TEMPLATE = "report.html.j2"

VERDICT_COLUMNS: tuple[str, ...] = ("figure", "device", "value", "band", "verdict", "why")
"""The cells of a verdict row, as the page shows them (`bwprof accept` fills them in)."""

RESULT_TABLE_COLUMNS: tuple[str, ...] = (
    "case", "device", "direction", "phase", "size_bytes", "threads", "value_best",
    "value_median", "unit", "cv", "pct_of_peak", "status", "flags", "note")
"""The columns of results.csv the page's results table shows (every column is in the
dictionary below it and in the file)."""


def _text(value: object) -> str:
    if is_missing(value):
        return ""
    return printable(str(value))


def _cell(column: str, value: object, simulated: bool) -> str:
    """A results cell as the page shows it; a simulated row's figures never as numbers."""
    if is_missing(value):
        return ""
    if column == "size_bytes":
        size = cell_int(value)
        return "" if size is None else format_bytes(size)
    if column in ("value_best", "value_median", "pct_of_peak"):
        if simulated:
            return "simulated"
        number = cell_float(value)
        return "" if number is None else f"{number:.4g}" if column != "pct_of_peak" \
            else f"{number:.0f}%"
    if column == "cv":
        number = cell_float(value)
        return "" if number is None or simulated else f"{100 * number:.1f}%"
    if column == "threads":
        count = cell_int(value)
        return "" if count is None else str(count)
    return _text(value)


def _markdown(meaning: str) -> Markup:
    """A dictionary meaning (Markdown with `code`) as HTML, every other character escaped."""
    parts = meaning.split("`")
    return Markup("").join(escape(part) if number % 2 == 0 else Markup("<code>%s</code>") % part
                           for number, part in enumerate(parts))


def _identity(run: Run) -> dict[str, object]:
    meta = run.meta
    host = meta.host
    gpus = []
    for device in meta.gpus.devices:
        extra = device.metadata
        gpus.append({
            "index": f"gpu{device.index}",
            "name": _text(device.name),
            "uuid": _text(extra.get("uuid")),
            "pci": _text(device.properties.pci_bus_id),
            "memory": format_bytes(device.properties.total_memory_bytes),
            "driver": _text(extra.get("driver_version")),
            "cuda": _text(extra.get("cuda_driver_version")),
            "vbios": _text(extra.get("vbios_version")),
        })
    return {
        "run_id": _text(run.run_id),
        "host": _text(meta.hostname),
        "machine": run.machine,
        "cpu": _text(host.cpu_model) if host is not None else "",
        "os": _text(f"{host.os} {host.kernel}") if host is not None else "",
        "bwprof": _text(meta.bwprof_version),
        "commit": _text(meta.bwprof_commit),
        "started": _text(meta.started_utc),
        "finished": _text(meta.finished_utc),
        "state": run.state_text,
        "command": " ".join(_text(part) for part in meta.command_line),
        "simulated": run.simulated,
        "gpus": gpus,
        "no_gpu": _text(meta.gpus.reason or meta.gpus.detail),
    }


def _findings(findings: pd.DataFrame | None) -> list[dict[str, str]]:
    if findings is None:
        return []
    return [{key: _text(record.get(key)) for key in ("severity", "device", "what", "why",
                                                     "evidence")}
            for record in findings.to_dict("records")]


def _results(results: pd.DataFrame) -> list[list[str]]:
    columns = [c for c in RESULT_TABLE_COLUMNS if c in results.columns]
    return [[_cell(c, record.get(c), record.get("backend") == "simulated") for c in columns]
            for record in results.to_dict("records")]


def _picture(picture: Picture) -> dict[str, str]:
    data = base64.b64encode(picture.data).decode("ascii")
    return {"name": printable(picture.name), "src": f"data:{picture.mime};base64,{data}"}


def render_html(run: Run, pictures: Sequence[Picture] = (),
                verdicts: Sequence[Mapping[str, object]] = (),
                notes: Sequence[str] = ()) -> str:
    """The page. `verdicts`: rows of `VERDICT_COLUMNS` (`verdict_rows`; none: the page says
    there is no verdict in this run); `notes`: what reading the run or drawing the plots
    left out."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    environment = Environment(loader=PackageLoader("bwprof.render", "templates"),
                              autoescape=True, undefined=StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)
    columns, rows = summary_grid(run.summary)
    lines = report_lines(run)
    shown = [c for c in RESULT_TABLE_COLUMNS if c in run.results.columns]
    dictionary = [(names, _markdown(meaning)) for names, meaning in groups(CSV_COLUMNS)]
    return environment.get_template(TEMPLATE).render(
        id=_identity(run),
        verdict_columns=VERDICT_COLUMNS,
        verdicts=[{c: _text(v.get(c)) for c in VERDICT_COLUMNS} for v in verdicts],
        summary_columns=[c for c, _ in columns],
        summary_rows=rows,
        lines=[_text(line) for kind, found in lines.items() if kind != "findings"
               for line in found],
        findings=_findings(run.findings),
        pictures=[_picture(p) for p in pictures],
        result_columns=shown,
        results=_results(run.results),
        dictionary=dictionary,
        flags=[(flag, meaning) for flag, meaning in FLAGS.items()],
        notes=[_text(note) for note in (*run.notes, *notes)],
        generator=f"bwprof {__version__}",
    )


def verdict_rows(run: Run) -> list[dict[str, object]]:
    """The run judged against the built-in bands (`bwprof accept` without a spec), as rows
    of VERDICT_COLUMNS; none for a simulated run (nothing there is a measurement). A check
    bwprof's own error left unjudged is ERROR, a figure from a busy host CANNOT JUDGE
    (busy), as `accept` says them."""
    if run.simulated:
        return []
    rows: list[dict[str, object]] = []
    for check in run.checks:
        value = ("" if check.value is None
                 else f"{check.value:.4g} {check.unit} (median)".replace("  ", " "))
        at_least, below = (">=", "<") if check.higher_is_better else ("<=", ">")
        band = ("" if check.warn is None or check.fail is None
                else f"PASS {at_least} {check.warn:.4g}, FAIL {below} {check.fail:.4g}")
        marks = [word for word, marked in (("noisy", check.noisy), ("busy", check.busy))
                 if marked]
        rows.append({"figure": f"{check.path} ({check.case})", "device": check.device,
                     "value": value, "band": band,
                     "verdict": check.verdict.replace("_", " ")
                                + (f" ({', '.join(marks)})" if marks else ""),
                     "why": check.reason})
    return rows


def write_html(run: Run, target: Path,
               pictures: Sequence[Picture] = (), notes: Sequence[str] = ()) -> Path:
    """report.html, written whole (OutputError where it cannot be), with the run's verdict
    against the built-in bands."""
    page = render_html(run, pictures, notes=notes, verdicts=verdict_rows(run))
    with atomic_file(target) as handle:
        handle.write(page)
    return target
