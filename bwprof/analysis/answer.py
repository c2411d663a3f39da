"""The answer first: a box's overall verdict in one line, the worst path named, and the next
step, for the end of `bwprof run`, the top of `bwprof report` and of report.html.

The verdict is `bwprof accept`'s with the built-in bands (`Run.checks`): the worst judged
check (FAIL, WARN, PASS), CANNOT JUDGE where nothing could be judged, and bwprof's own
errors (ERROR) said apart, never the box's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bwprof.analysis.bands import PATH_LABELS
from bwprof.analysis.judge import CANNOT_JUDGE, ERROR, FAIL, PASS, VERDICTS, WARN, Check, worst
from bwprof.analysis.run import Run


@dataclass(frozen=True)
class Answer:
    """A run's overall verdict, the checks behind it, and what to do next."""

    verdict: str
    """PASS, WARN, FAIL or CANNOT_JUDGE (`bwprof.analysis.judge.VERDICTS`)."""
    worst: Check | None
    """The check that decides a FAIL or WARN (the worst, first found); None otherwise."""
    counts: dict[str, int] = field(default_factory=dict)
    errors: tuple[Check, ...] = ()
    """bwprof's own errors: paths it could not judge, not the box's fault."""
    simulated: bool = False

    @property
    def label(self) -> str:
        """'PASS', 'CANNOT JUDGE': the verdict as people read it."""
        return self.verdict.replace("_", " ")

    def line(self) -> str:
        """'verdict: FAIL — HBM gpu0 (hbm_triad): 82% of band, 78% of peak; 9 checks: ...'."""
        if self.simulated:
            return ("verdict: CANNOT JUDGE — a simulated run (test figures, not "
                    "measurements): nothing here says anything of this box")
        counts = ", ".join(f"{n} {v.lower().replace('_', ' ')}" for v, n in self.counts.items())
        head = f"verdict: {self.label}"
        if self.worst is not None:
            head += f" — worst: {_named(self.worst)}: {_why(self.worst)}"
        head += f" ({counts})" if counts else " (nothing judged)"
        if self.errors:
            cases = ", ".join(dict.fromkeys(c.case for c in self.errors))
            head += f"; bwprof's own error in {cases}: not the box's, not judged"
        return head

    def next_step(self, run_dir: str | None, page: str | None = None) -> str:
        """What to do now, in one line (`run_dir` as the user typed it, where known; `page`
        the report.html written for the run, where one was: none is named otherwise)."""
        where = run_dir or "RUN_DIR"
        seen = f"; the page: {page}" if page else ""
        if self.simulated:
            return "next: run `bwprof run` without --simulate to measure this box"
        if self.verdict in (FAIL, WARN):
            return (f"next: `bwprof accept {where}` says why per path (bands: "
                    f"docs/verdicts.md){seen}")
        if self.verdict == PASS:
            return (f"next: keep it for trends with `bwprof history add {where} --store "
                    f"STORE`{seen}")
        return (f"next: `bwprof accept {where}` says why nothing could be judged (no band "
                "for this part, or no figure beyond the caches)")


def _named(check: Check) -> str:
    label = PATH_LABELS.get(check.path, check.path)
    return f"{label} {check.device} ({check.case})"


def _why(check: Check) -> str:
    if check.pct_of_band is not None:
        peak = (f", {check.pct_of_peak:.0f}% of peak" if check.pct_of_peak is not None
                else "")
        return f"{check.pct_of_band:.0f}% of its band{peak}"
    return check.reason if len(check.reason) <= 80 else check.reason[:79] + "…"


def answer(run: Run) -> Answer:
    """The run's overall verdict against the built-in bands (`Run.checks`, judged once)."""
    checks = run.checks
    verdicts = [c.verdict for c in checks]
    overall = worst(verdicts)
    bad = [c for c in checks if c.verdict in (FAIL, WARN)]
    decisive = min(bad, key=lambda c: VERDICTS.index(c.verdict)) if bad else None
    counts = {v: verdicts.count(v) for v in (PASS, WARN, FAIL, CANNOT_JUDGE, ERROR)
              if v in verdicts}
    return Answer(overall, decisive, counts, tuple(c for c in checks if c.verdict == ERROR),
                  simulated=run.simulated)
