"""`bwprof accept`'s analysis: every run held against its bands, the boxes' verdicts, the
fleet's outliers and the notes beside them. `bwprof.render.accept` shows it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress
from operator import attrgetter

from bwprof.analysis import outliers as fleet
from bwprof.analysis.judge import CANNOT_JUDGE, ERROR, FAIL, PASS, WARN, Check, worst
from bwprof.analysis.run import Run
from bwprof.analysis.spec import Spec
from bwprof.errors import EXIT_FAILED, EXIT_OK
from bwprof.schema.table import gc_paused
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
        with gc_paused():  # a row of dicts per GPU, no cycle among them
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


def more_gpus_than(checks: Sequence[Check], count: int) -> bool:
    """Whether the checks judge more than `count` GPUs, read only until they do."""
    seen: set[tuple[str, str, str]] = set()
    for c in checks:
        if c.gpu_model:
            seen.add((c.run_dir, c.box, c.device))
            if len(seen) > count:
                return True
    return False


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


@dataclass
class FleetDigest:
    """What a fleet's digest says, counted in one pass over its checks' columns."""

    cases: list[CaseVerdicts]
    """Per path and case, in the judge's order."""
    gpus: int
    """How many GPUs were judged (`fleet_gpus`)."""
    boxes: dict[tuple[str, str], str]
    """Each box's verdict (`worst` of its checks), keyed by (run folder, box)."""
    erred: set[tuple[str, str]]
    """The boxes with an ERROR check."""
    told: Counter[str]
    """How many checks have each verdict."""


_COLUMNS = attrgetter("run_dir", "box", "device", "path", "case", "verdict", "gpu_model",
                      "reason", "pct_of_band")


def fleet_digest(checks: Sequence[Check]) -> FleetDigest:
    """A fleet's counts per path and case, box and verdict. Each check's fields are read
    once, into columns, and counted with `Counter` and sets over them: a loop of Python per
    check per count cost a second at 120,000 checks. A GPU with several checks of one case
    counts once, by its worst (`_RANK`)."""
    if not checks:
        return FleetDigest([], 0, {}, set(), Counter())
    with gc_paused():  # tuples by the hundred thousand, no cycle among them
        return _fleet_digest(checks)


def _fleet_digest(checks: Sequence[Check]) -> FleetDigest:
    run_dirs, boxes, devices, paths, cases, verdicts, models, reasons, pcts = zip(
        *map(_COLUMNS, checks), strict=True)
    keys = list(zip(paths, cases, strict=True))
    gpus = len(set(compress(zip(run_dirs, boxes, devices, strict=True), models)))
    by_box: dict[tuple[str, str], list[str]] = {}
    for run_dir, box, verdict in Counter(zip(run_dirs, boxes, verdicts, strict=True)):
        by_box.setdefault((run_dir, box), []).append(verdict)
    box_verdict = {box: worst(seen) for box, seen in by_box.items()}
    erred = {box for box, seen in by_box.items() if ERROR in seen}
    per_device = list(zip(run_dirs, boxes, devices, paths, cases, strict=True))
    if len(set(per_device)) == len(per_device):  # each GPU's case judged once: as it is
        counted = Counter(zip(keys, verdicts, strict=True))
    else:
        merged: dict[tuple[str, ...], str] = {}
        for device, verdict in zip(per_device, verdicts, strict=True):
            before = merged.get(device)
            if before is None or _RANK[verdict] < _RANK[before]:
                merged[device] = verdict
        counted = Counter(((d[3], d[4]), v) for d, v in merged.items())
    with_gpu = set(compress(keys, models))
    unjudged: dict[tuple[str, str], dict[str, int]] = {}
    for (key, reason), many in Counter(compress(
            zip(keys, reasons, strict=True), [v == CANNOT_JUDGE for v in verdicts])).items():
        unjudged.setdefault(key, {})[reason] = many
    bad: dict[tuple[str, str], list[Check]] = {}
    for i in compress(range(len(checks)), [v in BAD for v in verdicts]):
        bad.setdefault(keys[i], []).append(checks[i])
    lowest: dict[tuple[str, str], int] = {}
    for i, (key, pct) in enumerate(zip(keys, pcts, strict=True)):
        if pct is not None and (key not in lowest or pct < pcts[lowest[key]]):
            lowest[key] = i
    out = []
    for key in dict.fromkeys(keys):
        counts = {v: counted[(key, v)] for v in (FAIL, WARN, PASS, CANNOT_JUDGE, ERROR)}
        mine = sorted(bad.get(key, []), key=_bad_order)
        said = unjudged.get(key)
        why = None
        if said:
            reason = max(said, key=lambda r: said[r])  # the first of the most common
            why = (reason, said[reason], sum(said.values()))
        low = lowest.get(key)
        out.append(CaseVerdicts(key[0], key[1], "GPUs" if key in with_gpu else "hosts",
                                counts, mine[:FLEET_WORST], len(mine),
                                checks[low] if low is not None else None, why))
    return FleetDigest(out, gpus, box_verdict, erred, Counter(verdicts))


def case_verdicts(checks: Sequence[Check]) -> list[CaseVerdicts]:
    """Per path and case (in the judge's order), the counts, worst and lowest checks of a
    fleet (`fleet_digest`)."""
    return fleet_digest(checks).cases
