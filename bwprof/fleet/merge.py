"""Rank 0's merge of a fleet run: every rank's report into one run folder, written through the
same `RunWriter` as a single run's, so the merged files have one writer and one format.

Rows name their node (`node7:gpu0`), carry their rank and keep their raw samples (timings
point at the merged rows); a rank that failed adds an `error` row with its message, one that
never reported an `error` row saying so. The metadata is rank 0's, with every node described
under `nodes` and every rank under `mpi`. No MPI here: the ranks' reports arrive as data.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from bwprof import api, interrupts
from bwprof.analysis.findings import findings_frame
from bwprof.analysis.fleet import fleet_findings
from bwprof.coerce import integer, number
from bwprof.errors import OutputError
from bwprof.render.outputs import write_report_files
from bwprof.schema.meta import MpiMeta, NodeMeta, RankMeta, RunMeta, box_label
from bwprof.schema.rows import CSV_COLUMNS, SCHEMA_VERSION, ResultRow
from bwprof.schema.table import checked_results, rows_from_frame
from bwprof.store.export import RESULTS_FILE, RunWriter, write_system_json
from bwprof.telemetry.session import SAMPLE_COLUMNS

FLEET_SAMPLE_COLUMNS: tuple[str, ...] = (*SAMPLE_COLUMNS, "rank", "host")
"""samples.csv of a merged run: each sample also says which rank and node took it."""


@dataclass
class RankReport:
    """What one rank sends to rank 0 at the end: its files' records and its metadata."""

    rank: int
    host: str
    local_rank: int
    local_size: int
    gpus: list[int]
    host_cases: bool
    rows: list[dict[str, object]] = field(default_factory=list)
    timings: list[dict[str, object]] = field(default_factory=list)
    samples: list[dict[str, object]] = field(default_factory=list)
    findings: list[dict[str, object]] = field(default_factory=list)
    timelines: list[dict[str, object]] = field(default_factory=list)
    meta: RunMeta | None = None
    notes: list[str] = field(default_factory=list)
    """What reading the rank's own files left out (a damaged one), for rank 0 to say."""
    """The rank's own metadata (None where it failed before writing any)."""
    error: str | None = None
    interrupted: str | None = None
    """The stop signal that cut the rank's measurement short ('SIGTERM'), if one did."""


def prefixed(device: object, host: str) -> str:
    """Fleet rows name their node: 'gpu0' on node7 becomes 'node7:gpu0', and each side of a
    pair is named ('node7:gpu0->node7:gpu1'); rank pairs already say which ranks."""
    text = "" if device is None or device != device else str(device)  # NaN != NaN
    if not text or text.startswith("rank"):
        return text
    for arrow in ("<->", "->"):
        if arrow in text:
            return arrow.join(f"{host}:{side}" for side in text.split(arrow))
    return f"{host}:{text}"


def _box(report: RankReport) -> str | None:
    """The box key of a rank's machine; None where its metadata recorded no identity."""
    host = report.meta.host if report.meta is not None else None
    return host.box if host is not None else None


def node_names(received: Mapping[int, RankReport]) -> dict[int, str]:
    """Each rank's node name: its host name, or `host#box` where ranks of one host name
    report different box keys (two machines both named `vm` are two nodes, not one). A rank
    without a box key joins its host name, as before identities were recorded."""
    boxes: dict[str, set[str]] = defaultdict(set)
    for report in received.values():
        box = _box(report)
        if box:
            boxes[report.host].add(box)
    names = {}
    for rank, report in received.items():
        identity = report.meta.host.identity if report.meta and report.meta.host else None
        shared = len(boxes[report.host]) > 1 and _box(report)
        names[rank] = box_label(report.host, identity) if shared else report.host
    return names


def _error_row(run_id: str, rank: int, host: str, note: str) -> dict[str, object]:
    return ResultRow.bare(run_id=run_id, host=host, case="rank", backend="mpi", status="error",
                          note=note, device=f"rank{rank}", rank=rank).as_dict()


def _describe_node(nodes: dict[str, NodeMeta], host: str, meta: RunMeta | None) -> None:
    """Add a rank's metadata to its node's entry: the first rank on a node describes its host
    and telemetry; with several ranks on a node (one GPU each) every rank adds its GPUs."""
    if meta is None:
        return
    if host not in nodes:
        nodes[host] = NodeMeta(host=meta.host, gpus=meta.gpus, telemetry=meta.telemetry)
        return
    node = nodes[host]
    known = {device.index for device in node.gpus.devices}
    added = [device for device in meta.gpus.devices if device.index not in known]
    if added:
        devices = sorted([*node.gpus.devices, *added], key=lambda device: device.index)
        nodes[host] = replace(node, gpus=replace(
            node.gpus, devices=tuple(devices), used=tuple(d.index for d in devices)))


@dataclass
class _Merged:
    """The ranks' records, renamed by node and renumbered for the merged files."""

    rows: list[dict[str, object]] = field(default_factory=list)
    seconds: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    """Merged row number -> (sample, seconds per operation) of its timings."""
    samples: list[dict[str, object]] = field(default_factory=list)
    findings: list[dict[str, object]] = field(default_factory=list)
    timelines: list[dict[str, object]] = field(default_factory=list)
    ranks: list[RankMeta] = field(default_factory=list)
    nodes: dict[str, NodeMeta] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, run_id: str, report: RankReport, node: str) -> None:
        """Add a rank's records under its node's name (`node_names`)."""
        host, rank = node, report.rank
        self.notes += [f"rank {rank} on {host}: {note}" for note in report.notes]
        offset = len(self.rows)  # the rank's row n is the merged file's row offset + n
        for row in report.rows:
            self.rows.append({**row, "device": prefixed(row.get("device"), host), "rank": rank,
                              "host": row.get("host") or report.host})
        if report.error:
            self.rows.append(_error_row(run_id, rank, report.host,
                                        f"rank {rank} on {host} failed: {report.error}"))
        for timing in report.timings:
            self.seconds[integer(timing["result_row"]) + offset].append(
                (integer(timing.get("sample", 0)), number(timing["seconds_per_op"])))
        self.samples += [{**s, "rank": rank, "host": report.host,
                          "device": prefixed(s.get("device"), host)} for s in report.samples]
        self.findings += [{**f, "device": prefixed(f.get("device"), host)}
                          for f in report.findings]
        self.timelines += [{**t, "device": prefixed(t.get("device"), host)}
                           for t in report.timelines]
        failed = bool(report.error) or any(r.get("status") in ("invalid", "error")
                                           for r in report.rows)
        status = ("failed" if failed else "interrupted" if report.interrupted else "ok")
        self.ranks.append(RankMeta(rank=rank, status=status, host=report.host,
                                   local_rank=report.local_rank, local_size=report.local_size,
                                   gpus=tuple(report.gpus), host_cases=report.host_cases,
                                   error=report.error or report.interrupted))
        _describe_node(self.nodes, host, report.meta)

    def missing(self, run_id: str, rank: int, timeout_s: float) -> None:
        self.rows.append(_error_row(run_id, rank, "", f"rank {rank} did not report within "
                                                      f"{timeout_s:g} s (hung or died)"))
        self.ranks.append(RankMeta(rank=rank, status="missing"))




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


def fleet_stop(meta: RunMeta, ranks: Sequence[RankMeta]) -> RunMeta:
    """The merged run is interrupted where a rank was (fate `interrupted`, its `error` the
    signal): system.json says so, by which signal and on which ranks, and, as for a single
    run, no report files are drawn (mpirun kills the ranks a second after its SIGTERM)."""
    stopped = [rank for rank in ranks if rank.status == "interrupted"]
    if not stopped or meta.interrupted:
        return meta
    return replace(meta, interrupted=True, stopped_by=(
        f"{stopped[0].error or 'interrupted'} (rank(s) "
        f"{', '.join(str(rank.rank) for rank in stopped)})"))


def merge(out: Path, run_id: str, received: Mapping[int, RankReport], size: int,
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
            merged.add(run_id, report, names[rank])
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
