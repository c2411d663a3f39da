"""Rank 0's merge of a fleet run: every rank's report into one run folder, written through the
same `RunWriter` as a single run's, so the merged files have one writer and one format.

Rows name their node (`node7:gpu0`), carry their rank and keep their raw samples (timings
point at the merged rows); a rank that failed adds an `error` row with its message, one that
never reported an `error` row saying so. The metadata is rank 0's, with every node described
under `nodes` and every rank under `mpi`. No MPI here: the ranks' reports arrive as data.
"""

from __future__ import annotations

import json
import os
import tempfile
from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from bwprof import api, interrupts
from bwprof.analysis import figures
from bwprof.analysis.findings import Finding, findings_frame
from bwprof.analysis.fleet import (  # _headline: one rank's headline rows, as the fleet's
    FIGURE,
    HEADLINE_CASES,
    _headline,
    box_labels,
    differing_nodes,
    slower_nodes,
)
from bwprof.coerce import integer, number
from bwprof.errors import OutputError
from bwprof.render.outputs import write_report_files
from bwprof.schema.meta import (
    MachineIdentity,
    MpiMeta,
    NodeMeta,
    RankMeta,
    RunMeta,
    box_label,
)
from bwprof.schema.rows import CSV_COLUMNS, SCHEMA_VERSION, ResultRow
from bwprof.schema.table import checked_results, read_results, rows_from_frame
from bwprof.store.atomic import atomic_file, write_csv_atomic
from bwprof.store.export import (
    FINDINGS_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    SYSTEM_FILE,
    TIMELINES_FILE,
    RunWriter,
    versioned,
    write_system_json,
)
from bwprof.store.runfolder import read_samples, read_system
from bwprof.telemetry.session import SAMPLE_COLUMNS

FLEET_SAMPLE_COLUMNS: tuple[str, ...] = (*SAMPLE_COLUMNS, "rank", "host")
"""samples.csv of a merged run: each sample also says which rank and node took it."""


@dataclass
class RankReport:
    """What one rank sends to rank 0 at the end: its files' records and its metadata."""

    rank: int
    host: str
    local_rank: int | None
    local_size: int | None
    gpus: list[int]
    host_cases: bool | None
    """None where rank 0 read the report from the rank's folder (`missing`): not known."""
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
    missing: bool = False
    """The rank sent nothing in time, and its folder does not say it stopped: its fate is
    `missing` (an `error` row says so), its finished rows, read from its folder, kept."""
    missing_note: str | None = None
    """A `missing` rank's error row, where more is known than that it did not report (rank
    0 silent before its merge, the others' folders merged in its place)."""


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


@dataclass(frozen=True)
class RankName:
    """What naming a rank's node takes (`node_names`): its host name and box key. A streamed
    merge gathers these first (small), since one rank's name depends on every other rank's
    box key, and names each rank's rows as they arrive."""

    host: str
    box: str | None = None

    @property
    def label(self) -> str:
        """'host#box' (`box_label`), the host name alone without a box key."""
        return box_label(self.host, MachineIdentity(box=self.box, box_source=None))

    @classmethod
    def of(cls, report: RankReport) -> RankName:
        host = report.meta.host if report.meta is not None else None
        return cls(report.host, host.box if host is not None else None)


def node_names(received: Mapping[int, RankReport | RankName]) -> dict[int, str]:
    """Each rank's node name: its host name, or `host#box` where ranks of one host name
    report different box keys (two machines both named `vm` are two nodes, not one). A rank
    without a box key joins its host name, as before identities were recorded."""
    named = {rank: item if isinstance(item, RankName) else RankName.of(item)
             for rank, item in received.items()}
    boxes: dict[str, set[str]] = defaultdict(set)
    for name in named.values():
        if name.box:
            boxes[name.host].add(name.box)
    return {rank: name.label if len(boxes[name.host]) > 1 and name.box else name.host
            for rank, name in named.items()}


def _error_row(run_id: str, rank: int, host: str, note: str) -> dict[str, object]:
    return ResultRow.bare(run_id=run_id, host=host, case="rank", backend="mpi", status="error",
                          note=note, device=f"rank{rank}", rank=rank).as_dict()


def _describe_node(nodes: MutableMapping[str, NodeMeta], host: str,
                   meta: RunMeta | None) -> None:
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
    nodes: MutableMapping[str, NodeMeta] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, run_id: str, report: RankReport, node: str, timeout_s: float) -> None:
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
        elif report.missing:
            self.rows.append(_error_row(run_id, rank, report.host, report.missing_note or (
                _missing_note(rank, timeout_s, f"; its {len(report.rows)} finished row(s), "
                                               f"read from its folder, are kept"))))
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
        status = ("missing" if report.missing and not report.error else "failed" if failed
                  else "interrupted" if report.interrupted else "ok")
        self.ranks.append(RankMeta(rank=rank, status=status, host=report.host,
                                   local_rank=report.local_rank, local_size=report.local_size,
                                   gpus=tuple(report.gpus), host_cases=report.host_cases,
                                   error=report.error or report.interrupted))
        _describe_node(self.nodes, host, report.meta)

    def missing(self, run_id: str, rank: int, timeout_s: float) -> None:
        self.rows.append(_error_row(run_id, rank, "", _missing_note(rank, timeout_s)))
        self.ranks.append(RankMeta(rank=rank, status="missing"))


def _missing_note(rank: int, timeout_s: float, kept: str = "") -> str:
    return f"rank {rank} did not report within {timeout_s:g} s (hung or died){kept}"


def fleet_stop(meta: RunMeta, ranks: Sequence[RankMeta],
               cut_short: Sequence[int] = ()) -> RunMeta:
    """The merged run is interrupted where a rank was (fate `interrupted`, its `error` the
    signal): system.json says so, by which signal and on which ranks, and, as for a single
    run, no report files are drawn (mpirun kills the ranks a second after its SIGTERM).
    Rank 0's own 'SIGINT after every case was measured' (the signal came as it wrote its
    final files) is the job's only where no rank's measuring was `cut_short` (interrupted,
    or missing, before its folder was final): else the merged folder read as finished,
    every case measured, while a rank's cases were not."""
    stopped = [rank for rank in ranks if rank.status == "interrupted"]
    if not stopped or (meta.interrupted and not (meta.measured_everything and cut_short)):
        return meta
    return replace(meta, interrupted=True, stopped_by=(
        f"{stopped[0].error or 'interrupted'} (rank(s) "
        f"{', '.join(str(rank.rank) for rank in stopped)})"))


def _measured_everything(meta: RunMeta | None) -> bool:
    """Whether a rank's own folder holds every case it was to measure: final, or stopped
    only while it wrote its final files ('SIGTERM after every case was measured')."""
    return meta is not None and (meta.state == "finished" or meta.measured_everything)


def merge(out: Path, run_id: str, received: Mapping[int, RankReport], size: int,
          timeout_s: float, options: Mapping[str, Any]) -> api.RunResult:
    """Every rank's report at hand, merged as rank 0 merges them (`MergeStream`, rank by
    rank; a rank absent from `received` is missing) and returned as a RunResult with its
    report files; OutputError where the folder cannot take the files (the rows written
    before are kept and system.json says what stopped it)."""
    stream = MergeStream(out, run_id, {rank: RankName.of(report)
                                       for rank, report in received.items()}, size, timeout_s)
    try:
        for rank in sorted(received):
            stream.add(received[rank])
    except BaseException:
        stream.abandon()
        raise
    stream.close()
    return stream.result(options)


# ---- the streamed merge: one rank's records at a time -------------------------------------

PEER_KEYS = ["case", "size_bytes", "direction", "device_name"]
"""The nodes `slower_nodes` holds against each other: one case, size, direction, model."""
HEADLINE_KEPT = ("case", "backend", "device", "status", "flags", "size_bytes", "direction",
                 "device_name", FIGURE)
"""What the fleet's slower-node finding reads of a headline row (`slower_nodes`)."""


class _Spool:
    """JSON texts in an unnamed temporary file, read back one at a time: the merged
    system.json's nodes and timelines.json's timelines grow with the fleet (a node's host,
    GPUs and telemetry take about 15 KB of memory), so rank 0 keeps only where each is."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._at: dict[str, tuple[int, int]] = {}

    def put(self, key: str, value: object) -> None:
        """Store `value` (plain JSON) under `key`; again for one key replaces it in place
        of the order."""
        data = json.dumps(value, allow_nan=False).encode()
        self._file.seek(0, os.SEEK_END)
        self._at[key] = (self._file.tell(), len(data))
        self._file.write(data)

    def get(self, key: str) -> Any:
        offset, length = self._at[key]
        self._file.seek(offset)
        return json.loads(self._file.read(length))

    def names(self) -> list[str]:
        return list(self._at)

    def close(self) -> None:
        self._file.close()


class _Lines:
    """JSON values one a line in an unnamed temporary file, read back in order: the
    timelines, written into timelines.json at the end."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.count = 0

    def append(self, value: object) -> None:
        self._file.write(json.dumps(value, default=str).encode() + b"\n")
        self.count += 1

    def __iter__(self) -> Iterator[Any]:
        self._file.seek(0)
        for line in self._file:
            yield json.loads(line)

    def close(self) -> None:
        self._file.close()


class _Picks:
    """Every rank's headline picks (`_headline`), compact: what the slower-node finding
    compares (each pick's case, size, model ... once per distinct set; its device and
    figure in arrays), about 80 bytes a pick instead of a row's 250."""

    def __init__(self) -> None:
        self.keys: dict[tuple[object, ...], int] = {}
        self.key = array("l")
        self.figure = array("d")
        self.devices: list[str] = []

    def add(self, picked: pd.DataFrame) -> None:
        shared = [c for c in HEADLINE_KEPT if c not in ("device", FIGURE)]
        for row in picked.reindex(columns=list(HEADLINE_KEPT)).to_dict("records"):
            key = tuple(row[c] for c in shared)
            self.key.append(self.keys.setdefault(key, len(self.keys)))
            self.figure.append(float(row[FIGURE]))
            self.devices.append(str(row["device"]))

    def frame(self) -> pd.DataFrame:
        shared = [c for c in HEADLINE_KEPT if c not in ("device", FIGURE)]
        keys = list(self.keys)
        frame = pd.DataFrame([keys[k] for k in self.key], columns=shared)
        frame["device"] = self.devices
        frame[FIGURE] = list(self.figure)
        return frame.reindex(columns=list(HEADLINE_KEPT))

    def findings(self, nodes: Mapping[str, NodeMeta]) -> list[Finding]:
        """`fleet_findings` over every rank's picks, the slower-node comparison one group
        of peers at a time (`slower_nodes` makes a record of every row it is given: a
        group's, not the fleet's, at once); the same findings in the same order."""
        picks = self.frame()
        twice = picks.duplicated(["case", "device"], keep=False)
        if twice.any():  # two ranks of one node measured one device: the fleet's pick
            drop: list[Any] = []
            for _, group in picks[twice].groupby(["case", "device"], sort=False):
                records = group.reset_index().to_dict("records")
                chosen = figures.pick(records)
                drop += [r["index"] for r in records if r is not chosen]
            picks = picks.drop(index=drop)
        labels = box_labels(nodes)
        found: list[Finding] = []
        for _, group in picks.groupby(PEER_KEYS, dropna=False):
            found += slower_nodes(group, labels)
        return [*found, *differing_nodes(nodes)]


class _NodeSpool(MutableMapping[str, NodeMeta]):
    """The merged run's nodes (`_describe_node`), kept in a `_Spool`."""

    def __init__(self) -> None:
        self.spool = _Spool()

    def __getitem__(self, name: str) -> NodeMeta:
        return NodeMeta.from_dict(self.spool.get(name), f"nodes.{name}")

    def __setitem__(self, name: str, node: NodeMeta) -> None:
        self.spool.put(name, node.as_dict())

    def __delitem__(self, name: str) -> None:
        raise TypeError("a merged run's nodes are never removed")

    def __contains__(self, name: object) -> bool:
        return name in self.spool._at

    def __iter__(self) -> Iterator[str]:
        return iter(self.spool.names())

    def __len__(self) -> int:
        return len(self.spool._at)


def _write_json_spliced(target: Path, payload: Mapping[str, object], key: str,
                        members: Iterable[str], strict: bool, kept: Path) -> None:
    """Write `payload` as `write_json_atomic` does (indent 2), its top-level `key` (an empty
    {} or [] in `payload`) filled with `members` (each the JSON text of one entry, `"name":
    value` for an object) as they come: the same bytes, without the whole in memory."""
    text = (json.dumps(payload, indent=2, allow_nan=False) if strict
            else json.dumps(payload, indent=2, default=str))
    empty = "{}" if isinstance(payload[key], Mapping) else "[]"
    head, found, tail = text.partition(f"\n  {json.dumps(key)}: {empty}")
    assert found, f"{key} is not a top-level member of the payload"
    with atomic_file(target, kept=kept) as handle:
        handle.write(f"{head}\n  {json.dumps(key)}: {empty[0]}")
        written = False
        for member in members:
            handle.write(("," if written else "") + "\n    " + member.replace("\n", "\n    "))
            written = True
        handle.write(f"\n  {empty[1]}" if written else empty[1])
        handle.write(tail + "\n")


class MergeStream:
    """Rank 0's merge of a fleet run, one rank's report at a time (`Fleet.stream`): each
    rank's rows, timings and samples go to the merged files as they arrive, so rank 0's
    memory does not grow with the fleet. It keeps only what is small per rank: the rank's
    fate (`RankMeta`), its findings and notes, its headline rows (what the fleet's
    slower-node finding compares); the nodes' metadata and the timelines wait in a temporary
    file until system.json and timelines.json are written. The folder is, byte for byte,
    the one the in-memory merge it replaced wrote (tests/fleet/reference_merge.py).

    `names`: every reporting rank's `RankName` (gathered first: a rank's node name depends
    on the others'). Reports come in rank order (`add`); a rank skipped, or not come by
    `close`, is missing (an error row, status `missing`)."""

    def __init__(self, out: Path, run_id: str, names: Mapping[int, RankName], size: int,
                 timeout_s: float) -> None:
        self.out, self.run_id, self.size, self.timeout_s = out, run_id, size, timeout_s
        self.names = node_names(names)
        self.next = 0
        """The next rank in order: those before it are merged, or missing."""
        self.ranks: list[RankMeta] = []
        self.nodes = _NodeSpool()
        self.timelines = _Lines()
        self.findings = _Lines()
        self.headline = _Picks()
        self.notes: list[str] = []
        self.first: RunMeta | None = None
        """Rank 0's own metadata: the merged run's, with every node and rank added."""
        self.cut_short: list[int] = []
        """The ranks stopped (by a signal, or lost) before they measured every case: their
        own folders not final (`fleet_stop`)."""
        self.failure: OutputError | None = None
        """What stopped the merged files taking rows (a full disk): later ranks' rows are
        left out, their fates still recorded."""
        self.meta: RunMeta | None = None
        self.findings_frame: pd.DataFrame | None = None
        self.writer: RunWriter | None = None
        """Opened with the first rows: a folder that cannot take them is a `failure` too,
        and every rank still reports (rank 0 keeps receiving)."""

    def add(self, report: RankReport) -> None:
        """Merge one rank's report (ranks after the last one merged; those skipped are
        missing)."""
        if report.rank < self.next:
            raise ValueError(f"rank {report.rank} came after rank {self.next - 1}: "
                             f"a merge takes the ranks in order")
        self._missing_until(report.rank)
        if report.rank == 0:
            self.first = report.meta
        if (report.interrupted or report.missing) and not _measured_everything(report.meta):
            self.cut_short.append(report.rank)
        part = _Merged(nodes=self.nodes)
        part.add(self.run_id, report, self.names.get(report.rank, report.host),
                 self.timeout_s)
        self._write(part)
        self.next = report.rank + 1

    def _missing_until(self, rank: int, batch: int = 100) -> None:
        """The ranks before `rank` not merged are missing: their error rows, `batch` ranks
        to a write (one row each)."""
        for first in range(self.next, rank, batch):
            part = _Merged(nodes=self.nodes)
            for missing in range(first, min(first + batch, rank)):
                part.missing(self.run_id, missing, self.timeout_s)
            self._write(part)
        self.next = max(self.next, rank)

    def _write(self, part: _Merged) -> None:
        """One rank's renamed records: rows and samples to their files, the rest kept."""
        self.ranks += part.ranks
        self.notes += part.notes
        for finding in part.findings:
            self.findings.append(finding)
        for timeline in part.timelines:
            self.timelines.append(timeline)
        frame = checked_results(pd.DataFrame(part.rows, columns=list(CSV_COLUMNS)),
                                self.out / RESULTS_FILE)
        headline = frame[frame["case"].isin(HEADLINE_CASES)]
        if not headline.empty:  # the rank's pick of each (case, device), as the fleet's
            self.headline.add(_headline(headline))
        if self.failure is not None:
            return
        try:
            if self.writer is None:
                self._first_system_json()
                self.writer = RunWriter(self.out)
            for number, row in enumerate(rows_from_frame(frame)):
                self.writer.add(row, [seconds for _, seconds
                                      in sorted(part.seconds.get(number, []))])
            if part.samples:
                self.writer.add_samples(part.samples, FLEET_SAMPLE_COLUMNS)
        except OutputError as exc:  # the rows before are kept; system.json says what stopped
            self.failure = exc

    def _first_system_json(self) -> None:
        """The merged folder's first system.json, before its first row, never finalised (no
        `finished_utc`: state 'incomplete'), as a single run's folder holds one from its
        claim on: where rank 0 is killed or stopped mid-merge, `bwprof report` reads the
        rows merged so far as a run that stopped without finishing instead of refusing the
        folder. `close` replaces it with the final one."""
        meta = replace(self.first or RunMeta(schema_version=SCHEMA_VERSION),
                       schema_version=SCHEMA_VERSION, run_id=self.run_id, finished_utc=None,
                       interrupted=False, stopped_by=None, nodes=None,
                       mpi=MpiMeta(size=self.size, timeout_s=self.timeout_s))
        with interrupts.deferred():  # whole or not there: never a torn system.json
            write_system_json(self.out, meta, rows_kept=False)

    def close(self) -> None:
        """The ranks that never came are missing; then findings.csv, timelines.json and
        system.json. OutputError where the rows could not all be written (system.json says
        so) or timelines.json or system.json cannot be."""
        self._missing_until(self.size)
        try:
            if self.writer is None:  # a fleet of no rank at all: the header-only files
                self.writer = RunWriter(self.out)
            self.writer.close()
        except OutputError as exc:
            self.failure = self.failure or exc
        meta = self.first or RunMeta(schema_version=SCHEMA_VERSION)
        node = self.names.get(0)
        if node is not None and node in self.nodes:
            meta = replace(meta, gpus=self.nodes[node].gpus)
        meta = fleet_stop(replace(meta, schema_version=SCHEMA_VERSION, run_id=self.run_id,
                                  nodes={}, mpi=MpiMeta(size=self.size,
                                                        timeout_s=self.timeout_s,
                                                        ranks=tuple(self.ranks))), self.ranks,
                          self.cut_short)
        if self.failure is not None:
            meta = replace(meta, interrupted=True, stopped_by=f"output error: {self.failure}")
        findings = findings_frame([])
        if self.findings.count:
            findings = pd.DataFrame(list(self.findings), columns=list(findings.columns))
        self.findings.close()
        findings = pd.concat([findings, findings_frame(self.headline.findings(self.nodes))],
                             ignore_index=True)
        try:
            write_csv_atomic(versioned(findings), self.out / FINDINGS_FILE)  # as RunWriter
        except OutputError as exc:
            self.notes.append(f"findings.csv not written: {exc}")
        try:
            if self.failure is None and self.timelines.count:
                _write_json_spliced(
                    self.out / TIMELINES_FILE,
                    {"schema_version": SCHEMA_VERSION, "timelines": []}, "timelines",
                    (json.dumps(timeline, indent=2, default=str)
                     for timeline in self.timelines), strict=False, kept=self.out)
        except OutputError as exc:
            self.failure = self.failure or exc
            meta = replace(meta, interrupted=True, stopped_by=f"output error: {exc}")
        with interrupts.deferred():
            _write_json_spliced(
                self.out / SYSTEM_FILE, meta.as_dict(), "nodes",
                (f"{json.dumps(name)}: {json.dumps(self.nodes.spool.get(name), indent=2)}"
                 for name in self.nodes), strict=True, kept=self.out)
        self.timelines.close()
        self.nodes.spool.close()
        self.meta, self.findings_frame = meta, findings
        if self.failure is not None:
            raise self.failure

    def finalise(self, fallback: RunMeta | None) -> None:
        """Make the merged run final (its `finished_utc`), as a merge of every rank's folder
        in rank 0's place is: rank 0's metadata, else `fallback`'s (rank 0 left none). A
        killed rank 0's own system.json, never finalised, read as 'never finalised'."""
        meta = self.first or fallback
        if meta is not None:
            self.first = replace(meta, finished_utc=(meta.finished_utc
                                                     or api.utc_now().isoformat()))

    def abandon(self) -> None:
        """Close every file without writing the rest (a merge that failed)."""
        with suppress(OutputError):
            if self.writer is not None:
                self.writer.close()
        for spool in (self.timelines, self.findings, self.nodes.spool):
            spool.close()

    def result(self, options: Mapping[str, Any]) -> api.RunResult:
        """The merged run read back from its folder, as `bwprof report` reads it, and its
        report files (summary, report.html with the plots where `options` ask for them)."""
        assert self.findings_frame is not None, "close() first"
        frame = read_results(self.out / RESULTS_FILE)
        rows = rows_from_frame(frame)
        samples = (read_samples(self.out / SAMPLES_FILE)
                   if (self.out / SAMPLES_FILE).is_file() else None)
        result = api.RunResult(self.out, frame, read_system(self.out / SYSTEM_FILE),
                               measured_rows=rows, findings=self.findings_frame,
                               samples=samples)
        if self.meta is not None and self.meta.interrupted:  # no report files, as a run's
            result.notes, result.interrupted = list(self.notes), True
            return result
        plots = bool(options.get("plots", True))  # report.html with the plots, as a single run
        written = write_report_files(result, self.out,
                                     parquet=options.get("file_format") == "parquet",
                                     plots=plots, html=plots)
        result.files, result.notes = written.files, [*self.notes, *written.notes]
        return result
