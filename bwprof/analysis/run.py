"""The one `Run` object: what `bwprof run` produces and `bwprof.load(DIR)` returns.

A Run is the store's reading of a run (`bwprof.store.runfolder.RunFolder`: the rows as a
frame, the typed metadata, the samples, the findings, what reading left out) with what every
output derives from it: the rows as ResultRows, the summary (one row per memory path), the
verdicts against the built-in bands, and the roofline ceilings. Each is derived on first use
and kept, so a command that shows a run several ways (the terminal, summary.csv, the plots,
report.html) judges it once, builds its summary once and works out its ceilings once.

Setting a Run's rows, metadata or measured rows again forgets what was derived from the old
ones (`__setattr__`), so a derived part is never of other data than the Run holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from bwprof.schema import flags
from bwprof.schema.meta import RunMeta
from bwprof.schema.rows import FAILED_STATUSES, SCHEMA_VERSION, ResultRow
from bwprof.schema.table import each_cell, results_frame, rows_from_frame
from bwprof.store.runfolder import RunFolder, machine_line

if TYPE_CHECKING:
    from bwprof.analysis.judge import Check
    from bwprof.analysis.roofline import Ceilings
    from bwprof.analysis.spec import Spec


_DERIVED_FROM = frozenset({"results", "meta", "measured_rows"})
_DERIVED = ("rows", "line_rows", "summary", "checks", "ceilings", "machine")
"""The cached properties below, each derived from `_DERIVED_FROM`."""


@dataclass(eq=False)
class Run(RunFolder):
    """One run, measured here or read back from its folder, and everything derived from it."""

    measured_rows: list[ResultRow] | None = field(default=None, repr=False)
    """The rows as the run measured them, where it did here (`bwprof run`); a run read back
    gets its rows from the frame (`rows`)."""
    timelines: list[dict[str, object]] | None = field(default=None, repr=False)
    """The overlap cases' stream timelines, where the run holds them (`bwprof run`); None
    for a run read back: its plots read them from the folder's timelines.json."""
    _judged: list[tuple[Spec, list[Check]]] = field(default_factory=list, repr=False,
                                                   init=False)

    def __setattr__(self, name: str, value: object) -> None:
        changed = self.__dict__.get(name) is not value
        super().__setattr__(name, value)
        if changed and name in _DERIVED_FROM and "_judged" in self.__dict__:  # made: forget
            for derived in _DERIVED:
                self.__dict__.pop(derived, None)
            self._judged.clear()

    @classmethod
    def of(cls, folder: RunFolder) -> Run:
        """The Run of a folder the store read (the same frames, not copies)."""
        if isinstance(folder, cls):
            return folder
        return cls(**{f.name: getattr(folder, f.name) for f in fields(RunFolder)})

    @classmethod
    def from_frame(cls, results: pd.DataFrame, meta: RunMeta | None = None,
                   findings: pd.DataFrame | None = None) -> Run:
        """A Run of rows at hand, with no folder (a notebook's own frame, a test's)."""
        if meta is None:
            meta = RunMeta(schema_version=SCHEMA_VERSION)
        return cls(None, results, meta, findings=findings)

    @classmethod
    def from_rows(cls, rows: list[ResultRow], meta: RunMeta | None = None,
                  findings: pd.DataFrame | None = None) -> Run:
        """A Run of ResultRows at hand, with no folder."""
        run = cls.from_frame(results_frame(rows), meta, findings)
        run.measured_rows = list(rows)
        return run

    @cached_property
    def rows(self) -> list[ResultRow]:
        """Every row as a ResultRow: those measured, or those of results.csv."""
        if self.measured_rows is not None:
            return self.measured_rows
        return rows_from_frame(self.results)

    @cached_property
    def line_rows(self) -> list[ResultRow]:
        """The rows the report's lines read as ResultRows (`bwprof.render.terminal.
        report_lines`), in order: those that failed (invalid, error), simulated, measured
        on a busy host, or of the latency under a load (`load_N`); every row where the run
        measured them here. The overlap and not-run lines read the frame's columns instead
        (a fleet's overlap rows are a quarter of its million, its skipped and waived rows
        tens of thousands), and no line reads a healthy fleet's plain bandwidth rows: none
        of them becomes a ResultRow no line reads. Every row as a ResultRow: `rows`."""
        from bwprof.analysis.summary import is_loaded

        if self.measured_rows is not None or "rows" in self.__dict__:
            return self.rows
        results = self.results
        if results.empty:
            return []

        # Each test once per distinct cell (`each_cell`): a string column's own comparisons
        # cost a fleet's report a second.
        wanted = (each_cell(results["status"], lambda status: status in FAILED_STATUSES)
                  | each_cell(results["backend"], lambda backend: backend == "simulated")
                  | each_cell(results["flags"],
                              lambda cell: flags.BUSY_HOST in flags.split_flags(cell))
                  | each_cell(results["phase"], is_loaded))
        return rows_from_frame(results.take(np.flatnonzero(wanted)))

    @cached_property
    def summary(self) -> pd.DataFrame:
        """One row per memory path (the columns of summary.csv; `bwprof.analysis.summary`)."""
        from bwprof.analysis.summary import build_summary

        return build_summary(self.results)

    @cached_property
    def checks(self) -> list[Check]:
        """Every figure held against the built-in bands (`bwprof accept` without a spec)."""
        from bwprof.analysis.spec import Spec

        return self.judged(Spec())

    def judged(self, spec: Spec) -> list[Check]:
        """Every figure held against `spec`'s bands, judged once per spec."""
        from bwprof.analysis.judge import judge_run

        for judged_spec, checks in self._judged:
            if judged_spec is spec:
                return checks
        checks = judge_run(self, spec)
        self._judged.append((spec, checks))
        return checks

    @cached_property
    def ceilings(self) -> Ceilings:
        """The measured compute and bandwidth ceilings of the roofline."""
        from bwprof.analysis.roofline import ceilings

        return ceilings(self.results)

    @cached_property
    def machine(self) -> str:
        """'vm (AMD EPYC) · 8× NVIDIA H200': the host and its GPUs, for titles."""
        return machine_line(self.meta)
