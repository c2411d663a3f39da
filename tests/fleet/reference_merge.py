"""The fleet merge as it was before it became a stream (issue 36): every rank's report held
at once, merged in memory. Kept as the oracle `MergeStream` is held to byte for byte
(tests/fleet/test_merge_stream.py); bwprof itself merges only as a stream."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from bwprof import api, interrupts
from bwprof.analysis.findings import findings_frame
from bwprof.analysis.fleet import fleet_findings
from bwprof.errors import OutputError
from bwprof.fleet.merge import (
    FLEET_SAMPLE_COLUMNS,
    RankReport,
    _Merged,
    fleet_stop,
    node_names,
)
from bwprof.render.outputs import write_report_files
from bwprof.schema.meta import MpiMeta, RunMeta
from bwprof.schema.rows import CSV_COLUMNS, SCHEMA_VERSION
from bwprof.schema.table import checked_results, rows_from_frame
from bwprof.store.export import RESULTS_FILE, RunWriter, write_system_json


def _metadata(received: Mapping[int, RankReport], merged: _Merged, run_id: str, size: int,
              timeout_s: float) -> RunMeta:
    """Rank 0's metadata, with its node's GPUs from every rank there, each node and rank."""
    first = received.get(0)
    meta = (first.meta if first is not None and first.meta is not None
            else RunMeta(schema_version=SCHEMA_VERSION))
    node = node_names(received).get(0)
    if node is not None and node in merged.nodes:
        meta = replace(meta, gpus=merged.nodes[node].gpus)
    return replace(meta, schema_version=SCHEMA_VERSION, run_id=run_id, nodes=merged.nodes,
                   mpi=MpiMeta(size=size, timeout_s=timeout_s, ranks=tuple(merged.ranks)))


def merge_in_memory(out: Path, run_id: str, received: Mapping[int, RankReport], size: int,
          timeout_s: float, options: Mapping[str, Any]) -> api.RunResult:
    """Write the merged run folder on rank 0 (claimed by the caller, `bwprof.fleet.run`)
    and return it as a RunResult; OutputError where the folder cannot take the files (the
    rows written before are kept and system.json says what stopped it)."""
    merged = _Merged()
    names = node_names(received)
    for rank in range(size):
        report = received.get(rank)
        if report is None:
            merged.missing(run_id, rank, timeout_s)
        else:
            merged.add(run_id, report, names[rank], timeout_s)
    frame = checked_results(pd.DataFrame(merged.rows, columns=list(CSV_COLUMNS)),
                            out / RESULTS_FILE)
    rows = rows_from_frame(frame)
    meta = fleet_stop(_metadata(received, merged, run_id, size, timeout_s), merged.ranks)
    findings = findings_frame([])
    if merged.findings:
        findings = pd.DataFrame(merged.findings, columns=list(findings.columns))
    findings = pd.concat([findings, findings_frame(fleet_findings(frame, merged.nodes))],
                         ignore_index=True)
    notes: list[str] = list(merged.notes)
    failure: OutputError | None = None
    writer = RunWriter(out)
    try:
        for number, row in enumerate(rows):
            writer.add(row, [seconds for _, seconds in sorted(merged.seconds.get(number, []))])
        if merged.samples:
            writer.add_samples(merged.samples, FLEET_SAMPLE_COLUMNS)
        writer.add_timelines(merged.timelines)
    except OutputError as exc:  # the rows before are kept; system.json says what stopped it
        failure = exc
        meta = replace(meta, interrupted=True, stopped_by=f"output error: {exc}")
    finally:
        writer.close()
    try:
        writer.write_findings(findings)
    except OutputError as exc:
        notes.append(f"findings.csv not written: {exc}")
    with interrupts.deferred():
        write_system_json(out, meta)
    if failure is not None:
        raise failure
    result = api.RunResult(out, frame, meta, measured_rows=rows, timelines=merged.timelines,
                           findings=findings,
                           samples=(pd.DataFrame(merged.samples,
                                                 columns=list(FLEET_SAMPLE_COLUMNS))
                                    if merged.samples else None))
    if meta.interrupted:
        result.notes, result.interrupted = notes, True
        return result
    plots = bool(options.get("plots", True))  # report.html with the plots, as a single run
    written = write_report_files(result, out,
                                 parquet=options.get("file_format") == "parquet",
                                 plots=plots, html=plots)
    result.files, result.notes = written.files, [*notes, *written.notes]
    return result
