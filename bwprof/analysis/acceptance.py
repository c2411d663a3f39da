"""`bwprof accept`'s analysis: every run held against its bands, the boxes' verdicts, the
fleet's outliers and the notes beside them. `bwprof.render.accept` shows it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bwprof.analysis import outliers as fleet
from bwprof.analysis.judge import FAIL, Check, worst
from bwprof.analysis.run import Run
from bwprof.analysis.spec import Spec
from bwprof.errors import EXIT_FAILED, EXIT_OK
from bwprof.schema.text import one_line


@dataclass
class Acceptance:
    """Every check of every run folder, the boxes' verdicts, the fleet table."""

    checks: list[Check]
    spec: Spec
    outliers: list[fleet.Outlier] = field(default_factory=list)
    rows: list[dict[str, object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def boxes(self) -> dict[tuple[str, str], list[Check]]:
        out: dict[tuple[str, str], list[Check]] = {}
        for check in self.checks:
            out.setdefault((check.run_dir, check.box), []).append(check)
        return out

    @property
    def verdict(self) -> str:
        return worst([c.verdict for c in self.checks])

    @property
    def exit_code(self) -> int:
        """1 where a check fails; 0 otherwise, bwprof's own errors (ERROR) included: they
        are not the box failing, and the verdict line names them."""
        return EXIT_FAILED if any(c.verdict == FAIL for c in self.checks) else EXIT_OK


def unjudged_errors(run: Run, checks: list[Check]) -> list[str]:
    """A note per case whose rows raised but that no check reads (`ddr_copy`, `gemm_host`):
    bwprof's own error, said, though it decides nothing."""
    rows = run.results
    judged = {c.case for c in checks if c.run_dir == run.label}
    errors = rows[(rows["status"] == "error") & ~rows["case"].isin(list(judged))]
    notes = []
    for case, group in errors.groupby("case", sort=False):
        first = group.iloc[0]
        notes.append(f"{run.label}: bwprof error in {case} ({len(group)} row(s)): "
                     f"{one_line(str(first['note']))}; not a path accept judges, and the box "
                     "was not judged on it")
    return notes


def accept_runs(runs: Sequence[Run], spec: Spec) -> Acceptance:
    """Every run held against `spec` (each judged once: `Run.judged`), the fleet's outliers
    among them, and what the user should know: notes from reading, errors no check reads,
    runs that did not finish."""
    checks = [check for run in runs for check in run.judged(spec)]
    outliers = fleet.outliers([c for c in checks if not c.busy], spec.outlier_pct)
    notes = [f"{run.label}: {note}" for run in runs for note in run.notes]
    notes += [note for run in runs for note in unjudged_errors(run, checks)]
    notes += [f"{run.label}: the run {run.stop_phrase}; its verdicts cover what it measured"
              for run in runs if run.state != "finished"]
    notes += [f"spec: [gpu.{key}] is no GPU of these runs (no GPU name has the words "
              f"{key!r}): it judged nothing" for key in spec.unmatched(
                  {c.gpu_model for c in checks if c.gpu_model})]
    return Acceptance(checks, spec, outliers, fleet.fleet_rows(checks, outliers), notes)
