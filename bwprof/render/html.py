"""`report.html`: one self-contained page of a run that a reviewer can attach to a ticket.

The answer first (the box's overall verdict, its worst path and the next step:
`bwprof.analysis.answer`), then the box's identity, the verdict section, the summary beside
peak, the GPU-to-GPU matrix as a table, the findings, every plot (inline: SVG, or PNG where
the SVG would be large), the results table and the column dictionary, rendered by Jinja2 from
`templates/report.html.j2` with autoescape on: every string from a run folder is untrusted.
A flagged figure carries a mark beside it (`MARKS`, with a legend) wherever it is shown, so
a cache's or a noisy figure never reads as a clean one, on screen or on paper. Nothing is
fetched: no script, no font, no `http(s)://` resource; the page needs no JavaScript, stacks
its tables on a phone and keeps every column on A4.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from markupsafe import Markup, escape

from bwprof._version import __version__
from bwprof.analysis import figures
from bwprof.analysis.answer import Answer, answer
from bwprof.analysis.summary import p2p_matrix_rows
from bwprof.coerce import NAME_CHARACTERS, shorten
from bwprof.render.terminal import report_lines, summary_grid
from bwprof.schema import flags as f
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

MARKS: dict[str, str] = {
    f.IN_CACHE: "C", f.L2_RESIDENT: "L2", f.CACHE_SERVED: "CS", f.NOISY: "N",
    f.BUSY_HOST: "B", f.GPU_DEGRADED: "D", f.NUMA_UNVERIFIED: "U",
    f.CACHE_UNKNOWN: "C?", f.MIG_SLICE: "M", f.CONFIDENTIAL_COMPUTING: "CC",
    f.C2C_LINK: "C2C"}
"""The mark a figure carries beside it for each flag of its row (the legend says which is
which): short, so a flagged figure stays one cell wide on a phone and on paper. None for
`simulated`: such a figure is never shown as a number, the cell reads 'simulated'."""

DOUBTFUL: frozenset[str] = frozenset({
    f.IN_CACHE, f.L2_RESIDENT, f.CACHE_SERVED, f.NOISY, f.BUSY_HOST, f.GPU_DEGRADED})
"""Flags whose mark is drawn as a warning: the figure is a cache's, moves, is partly other
processes', a failing GPU's or not a measurement. The others' marks only inform."""

FIGURE_COLUMNS: frozenset[str] = frozenset({"value_best", "value_median"})
"""The results table's cells that carry their row's marks."""

P2P_CASE = "p2p_copy"
P2P_PNG = "p2p_heatmap.png"
"""The P2P heatmap's file (`bwprof.render.plots.P2P_PNG`): the page shows it beside the
matrix table rather than among the other plots."""


def _text(value: object) -> str:
    if is_missing(value):
        return ""
    return printable(str(value))


LINE_CHARACTERS = 1000
"""The longest line of the report's prose the page shows (a line names a GPU model, which a
tampered system.json can make 100,000 characters long)."""


def _name(value: object) -> str:
    """A host, CPU or GPU name as the page shows it: `shorten`ed (the files keep it whole)."""
    return shorten(_text(value), NAME_CHARACTERS)


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


def _marks(flags: object) -> list[dict[str, str]]:
    """A row's flags as the marks beside its figure, in vocabulary order."""
    present = f.split_flags(flags)
    return [{"mark": MARKS[flag], "flag": flag, "meaning": FLAGS[flag],
             "kind": "doubt" if flag in DOUBTFUL else "info"}
            for flag in FLAGS if flag in present and flag in MARKS]


def _legend(*groups_of_marks: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Each mark used, once, in vocabulary order: the legend under a table."""
    used = {m["flag"]: m for marks in groups_of_marks for m in marks}
    return [used[flag] for flag in FLAGS if flag in used]


def _wrappable(name: str) -> Markup:
    """A column name that may wrap after its underscores (`value_<wbr>median`), so a narrow
    table (a phone, A4) need not be wider than the page."""
    return Markup("_<wbr>").join(escape(part) for part in name.split("_"))


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
            "name": _name(device.name),
            "uuid": _text(extra.get("uuid")),
            "pci": _text(device.properties.pci_bus_id),
            "memory": format_bytes(device.properties.total_memory_bytes),
            "driver": _text(extra.get("driver_version")),
            "cuda": _text(extra.get("cuda_driver_version")),
            "vbios": _text(extra.get("vbios_version")),
        })
    return {
        "run_id": _text(run.run_id),
        "host": _name(meta.hostname),
        "machine": run.machine,
        "cpu": _name(host.cpu_model) if host is not None else "",
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


@dataclass(frozen=True)
class _Row:
    """A results row as the page shows it: its cells (column, text) and its figures' marks."""

    cells: list[tuple[str, str]]
    marks: list[dict[str, str]]


def _result_cell(column: str, value: object, simulated: bool) -> str:
    """A results cell; the long words (`overlap_bidir_compute`, `h2d+compute+d2h`) may wrap
    after `_` and `+` where the table is short of room, and the flags are spaced."""
    if column == "flags":
        return " ".join(sorted(f.split_flags(value), key=_flag_order))
    text = _cell(column, value, simulated)
    if column == "case":
        return _wrappable(text)
    if column == "direction":
        return Markup("+<wbr>").join(escape(part) for part in text.split("+"))
    return text


def _results(results: pd.DataFrame) -> list[_Row]:
    columns = [c for c in RESULT_TABLE_COLUMNS if c in results.columns]
    rows: list[_Row] = []
    for record in results.to_dict("records"):
        simulated = record.get("backend") == "simulated"
        cells = [(c, _result_cell(c, record.get(c), simulated)) for c in columns]
        rows.append(_Row(cells, _marks(record.get("flags"))))
    return rows


def _verdict_marks(row: Mapping[str, object]) -> list[dict[str, str]]:
    """The marks of a verdict row's figure (its `flags`: the flags `verdict_rows` names)."""
    named = row.get("flags")
    found = [str(flag) for flag in named] if isinstance(named, (list, tuple)) else []
    return _marks(f.SEPARATOR.join(flag for flag in found if flag in FLAGS))


def _flag_order(flag: str) -> int:
    return list(FLAGS).index(flag) if flag in FLAGS else len(FLAGS)


def _summary_marks(summary: pd.DataFrame, count: int) -> list[list[dict[str, str]]]:
    """The marks of the summary rows `summary_grid` shows (those with a figure or a status
    other than absent, in order: its own rule); none where the count differs from the
    grid's, rather than marks on the wrong rows."""
    shown = [record for record in summary.to_dict("records")
             if not is_missing(record.get("value")) or record.get("status") != "absent"]
    if len(shown) != count:
        return [[] for _ in range(count)]
    return [_marks(record.get("flags")) for record in shown]


def _answer(run: Run) -> dict[str, object]:
    """The overall verdict as the page's first lines: the verdict as a badge, the rest of
    `Answer.line()` beside it, bwprof's own errors on a line of their own, the next step."""
    found: Answer = answer(run)
    line = found.line()
    head = f"verdict: {found.label}"
    rest = line[len(head):] if line.startswith(head) else line
    rest, _, _ = rest.partition("; bwprof's own error")
    rest = rest.removeprefix(" — ").strip()
    errors = ""
    if found.errors:
        cases = ", ".join(dict.fromkeys(c.case for c in found.errors))
        errors = (f"bwprof's own error in {cases}: not the box's fault, and the box was not "
                  "judged there")
    # The step as the terminal says it, less where the page is: the reader is on it.
    step, _, _ = found.next_step(run.label if run.path is not None else None) \
        .partition("; the page:")
    return {"verdict": found.verdict, "label": found.label, "css": found.verdict.lower(),
            "rest": _text(rest), "errors": _text(errors), "error_count": len(found.errors),
            "next": _text(step), "line": _text(line), "simulated": found.simulated}


def _p2p(run: Run) -> dict[str, object] | None:
    """The P2P matrix as a table: source GPU rows by destination GPU columns, each cell the
    median GB/s of p2p_copy at the matrix's size ('-' where not measured, 'simulated' for
    a simulated figure); None without two GPUs measured."""
    rows = p2p_matrix_rows(run.results)
    pairs = [str(d).partition("->") for d in rows["device"]] if len(rows) else []
    measured = [(record, source, target) for record, (source, arrow, target)
                in zip(rows.to_dict("records"), pairs, strict=True) if arrow]
    if not measured:
        return None
    names = sorted({n for _, a, b in measured for n in (a, b)}
                   | {f"gpu{d.index}" for d in run.meta.gpus.devices},
                   key=lambda name: (len(name), name))
    cells: dict[tuple[str, str], _Row] = {}
    for record, source, target in measured:
        simulated = (record.get("backend") == "simulated"
                     or f.SIMULATED in f.split_flags(record.get("flags")))
        number = cell_float(record.get(figures.column("value")))
        text = "simulated" if simulated else "-" if number is None else f"{number:.4g}"
        cells[(source, target)] = _Row([("GB/s", text)], _marks(record.get("flags")))
    empty = _Row([("GB/s", "-")], [])
    size = cell_int(measured[0][0].get("size_bytes"))
    matrix = [(source, [cells.get((source, target), empty) for target in names])
              for source in names]
    return {"names": names, "rows": matrix,
            "size": format_bytes(size) if size is not None else "",
            "legend": _legend(*(c.marks for c in cells.values()))}


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
    summary_marks = _summary_marks(run.summary, len(rows))
    lines = report_lines(run)
    shown = [c for c in RESULT_TABLE_COLUMNS if c in run.results.columns]
    dictionary = [(names, _markdown(meaning)) for names, meaning in groups(CSV_COLUMNS)]
    verdict_cells = [{c: _text(v.get(c)) for c in VERDICT_COLUMNS} for v in verdicts]
    verdict_marks = [_verdict_marks(v) for v in verdicts]
    results = _results(run.results)
    shown_pictures = [_picture(p) for p in pictures]
    return environment.get_template(TEMPLATE).render(
        id=_identity(run),
        answer=_answer(run),
        verdict_columns=VERDICT_COLUMNS,
        verdicts=list(zip(verdict_cells, verdict_marks, strict=True)),
        verdict_legend=_legend(*verdict_marks),
        summary_columns=[c for c, _ in columns],
        summary_value_columns=[c for c, _ in columns if c in ("GB/s", "value")],
        summary_rows=[(path, cells, marks)
                      for (path, cells), marks in zip(rows, summary_marks, strict=True)],
        summary_legend=_legend(*summary_marks),
        lines=[shorten(_text(line), LINE_CHARACTERS) for kind, found in lines.items()
               if kind != "findings" for line in found],
        findings=_findings(run.findings),
        p2p=_p2p(run),
        p2p_picture=next((p for p in shown_pictures if p["name"] == P2P_PNG), None),
        pictures=[p for p in shown_pictures if p["name"] != P2P_PNG],
        result_columns=shown,
        result_headers=[_wrappable(c) for c in shown],
        results=results,
        results_legend=_legend(*(r.marks for r in results)),
        dictionary=dictionary,
        flags=[(flag, MARKS.get(flag, ""), "doubt" if flag in DOUBTFUL else "info", meaning)
               for flag, meaning in FLAGS.items()],
        notes=[_text(note) for note in (*run.notes, *notes)],
        generator=f"bwprof {__version__}",
    )


def verdict_rows(run: Run) -> list[dict[str, object]]:
    """The run judged against the built-in bands (`bwprof accept` without a spec), as rows
    of VERDICT_COLUMNS and `flags` (noisy, busy_host: the marks beside the value); none for
    a simulated run (nothing there is a measurement). A check bwprof's own error left
    unjudged is ERROR, a figure from a busy host CANNOT JUDGE (busy), as `accept` says
    them."""
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
                     "why": check.reason,
                     "flags": [flag for flag, marked in ((f.NOISY, check.noisy),
                                                         (f.BUSY_HOST, check.busy)) if marked]})
    return rows


def write_html(run: Run, target: Path,
               pictures: Sequence[Picture] = (), notes: Sequence[str] = ()) -> Path:
    """report.html, written whole (OutputError where it cannot be), with the run's verdict
    against the built-in bands."""
    page = render_html(run, pictures, notes=notes, verdicts=verdict_rows(run))
    with atomic_file(target) as handle:
        handle.write(page)
    return target
