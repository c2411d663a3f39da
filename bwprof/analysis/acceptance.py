"""`bwprof accept`'s analysis: every run held against its bands, the boxes' verdicts, the
fleet's outliers and the notes beside them. `bwprof.render.accept` shows it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from bwprof.analysis import outliers as fleet
from bwprof.analysis.judge import CANNOT_JUDGE, ERROR, FAIL, PASS, WARN, Check, worst
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
    notes: list[str] = field(default_factory=list)

    @cached_property
    def rows(self) -> list[dict[str, object]]:
        """The fleet table (`outliers.fleet_rows`), made where it is read (the fleet table,
        --json, --out's accept_fleet.csv): a fleet's digest does not need a row per GPU."""
        return fleet.fleet_rows(self.checks, self.outliers)

    @cached_property
    def boxes(self) -> dict[tuple[str, str], list[Check]]:
        """Each box's checks, keyed by (run folder, box), in the order the judge gave them."""
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


def unjudged_errors(run: Run, judged: set[str]) -> list[str]:
    """A note per case whose rows raised but that no check reads (`ddr_copy`, `gemm_host`):
    bwprof's own error, said, though it decides nothing. `judged`: the cases the run's
    checks read."""
    rows = run.results
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
    judged: dict[str, set[str]] = {}  # one pass over a fleet's checks, not one per run
    for check in checks:
        judged.setdefault(check.run_dir, set()).add(check.case)
    notes += [note for run in runs
              for note in unjudged_errors(run, judged.get(run.label, set()))]
    notes += [f"{run.label}: the run {run.stop_phrase}; its verdicts cover what it measured"
              for run in runs if run.state != "finished"]
    notes += [f"spec: [gpu.{key}] is no GPU of these runs (no GPU name has the words "
              f"{key!r}): it judged nothing" for key in spec.unmatched(
                  {c.gpu_model for c in checks if c.gpu_model})]
    return Acceptance(checks, spec, outliers, notes)


# -- a fleet's digest (`bwprof.render.accept.digest_lines`) ---------------------------------

FLEET_WORST = 5
"""The most GPUs (or boxes) a fleet's digest names per line of its kind."""
_RANK = {FAIL: 0, WARN: 1, PASS: 2, ERROR: 3, CANNOT_JUDGE: 4}
"""A GPU's verdict on a case where it has several checks of it: the worst judged one, then
bwprof's own error (it decides nothing, yet is worth saying), then cannot judge."""
BAD = (FAIL, WARN, ERROR)
"""The verdicts a digest names GPUs for: the box's failures and warnings, bwprof's errors."""


def fleet_gpus(checks: Sequence[Check]) -> int:
    """How many GPUs the checks judge: distinct (run folder, box, device) of GPU checks."""
    return len({(c.run_dir, c.box, c.device) for c in checks if c.gpu_model})


@dataclass
class CaseVerdicts:
    """One path and case of a fleet: how many GPUs (or hosts) have each verdict on it, the
    worst of them and the lowest % of band."""

    path: str
    case: str
    on: str
    """'GPUs', or 'hosts' where every check of the case is a host's (DDR, host latency)."""
    counts: dict[str, int]
    """GPUs (or hosts) per verdict (`CHECK_VERDICTS`), each counted once: its worst check."""
    worst: list[Check]
    """FAIL, then WARN, then ERROR checks, the lowest % of band first; at most FLEET_WORST."""
    bad: int
    """How many checks of the case are FAIL, WARN or ERROR (`worst` shows the first)."""
    lowest: Check | None
    """The check with the lowest % of band, whatever its verdict; None where none has one."""
    unjudged: tuple[str, int, int] | None
    """Where some cannot be judged: the most common reason, how many checks give it, and
    how many cannot be judged in all."""


def _bad_order(check: Check) -> tuple[int, float]:
    pct = check.pct_of_band
    return _RANK[check.verdict], pct if pct is not None else float("inf")


def case_verdicts(checks: Sequence[Check]) -> list[CaseVerdicts]:
    """Per path and case (in the judge's order), the counts, worst and lowest checks of a
    fleet: one pass over the checks, then per case work on its FAIL, WARN and ERROR checks
    alone."""
    devices: dict[tuple[str, str], dict[tuple[str, str, str], str]] = {}
    hosts_only: dict[tuple[str, str], bool] = {}
    bad: dict[tuple[str, str], list[Check]] = {}
    lowest: dict[tuple[str, str], Check] = {}
    reasons: dict[tuple[str, str], dict[str, int]] = {}
    for check in checks:
        key = (check.path, check.case)
        verdict = check.verdict
        seen = devices.setdefault(key, {})
        device = (check.run_dir, check.box, check.device)
        before = seen.get(device)
        if before is None or _RANK[verdict] < _RANK[before]:
            seen[device] = verdict
        hosts_only[key] = hosts_only.get(key, True) and not check.gpu_model
        if verdict in BAD:
            bad.setdefault(key, []).append(check)
        elif verdict == CANNOT_JUDGE:
            why = reasons.setdefault(key, {})
            why[check.reason] = why.get(check.reason, 0) + 1
        pct = check.pct_of_band
        if pct is not None:
            low = lowest.get(key)
            if low is None or pct < (low.pct_of_band or 0.0):
                lowest[key] = check
    out = []
    for key, seen in devices.items():
        counts = dict.fromkeys((FAIL, WARN, PASS, CANNOT_JUDGE, ERROR), 0)
        for verdict in seen.values():
            counts[verdict] += 1
        mine = sorted(bad.get(key, []), key=_bad_order)
        said = reasons.get(key)
        unjudged = None
        if said:
            reason = max(said, key=lambda r: said[r])  # the first of the most common
            unjudged = (reason, said[reason], sum(said.values()))
        out.append(CaseVerdicts(key[0], key[1], "hosts" if hosts_only[key] else "GPUs",
                                counts, mine[:FLEET_WORST], len(mine), lowest.get(key),
                                unjudged))
    return out


def box_verdicts(boxes: dict[tuple[str, str], list[Check]]) -> dict[tuple[str, str], str]:
    """Each box's verdict (`worst` of its checks), keyed as `Acceptance.boxes`."""
    return {key: worst([c.verdict for c in checks]) for key, checks in boxes.items()}
