"""Progress of a run on the terminal: a live bar, or one line per job for a log, each with
the time left by the plan's estimate (`bwprof.estimate`), corrected by how the run keeps to
it so far. The runner calls these (`bwprof.runner.ProgressListener`); the CLI chooses one."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import IO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from bwprof.measurement import Job
from bwprof.schema.rows import ResultRow
from bwprof.units import clock

SETTLE_S = 5.0
"""Before this much of the run has passed, the estimate is taken as it is: a correction
from a few seconds of start-up would swing the time left by minutes."""
PACE_BOUNDS = (0.5, 3.0)
"""The correction from how the run keeps to its estimate is held within these factors."""


def time_left(estimate_s: float | None, left_s: float | None, elapsed_s: float) -> float | None:
    """Seconds left: the estimate of the jobs left (`left_s`), scaled by how fast the run
    went so far against its estimate (`estimate_s` in all), within PACE_BOUNDS."""
    if left_s is None:
        return None
    expected = (estimate_s or 0.0) - left_s  # what the estimate says should have passed
    if elapsed_s < SETTLE_S or expected <= 0:
        return left_s
    pace = min(max(elapsed_s / expected, PACE_BOUNDS[0]), PACE_BOUNDS[1])
    return left_s * pace




class RichProgress:
    """Progress bar on stderr, one step per job that measures, naming the job that runs
    now."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: TaskID | None = None
        self._estimate_s: float | None = None
        self._began = time.monotonic()

    def start(self, total: int, estimate_s: float | None = None) -> None:
        self._estimate_s, self._began = estimate_s, time.monotonic()
        self._progress.start()
        self._task = self._progress.add_task("starting", total=total)

    def job_started(self, job: Job, left_s: float | None = None) -> None:
        if self._task is not None:
            left = time_left(self._estimate_s, left_s, time.monotonic() - self._began)
            eta = f" (about {clock(left)} left)" if left is not None else ""
            self._progress.update(self._task, description=job.label() + eta)

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        if self._task is not None:
            self._progress.advance(self._task)

    def job_not_run(self, job: Job, rows: Sequence[ResultRow]) -> None:
        """Not a step: the summary says what was skipped and why."""

    def stop(self) -> None:
        if self._task is not None:
            self._progress.stop()


class LineProgress:
    """Progress for a log: one plain line per job that measures, as it starts, where a live
    bar cannot be drawn (stderr is a file or pipe, or a fleet rank's pseudo-terminal behind
    mpirun)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._total = self._done = 0
        self._began = time.monotonic()
        self._estimate_s: float | None = None

    def start(self, total: int, estimate_s: float | None = None) -> None:
        self._total, self._done, self._began = total, 0, time.monotonic()
        self._estimate_s = estimate_s

    def job_started(self, job: Job, left_s: float | None = None) -> None:
        elapsed = time.monotonic() - self._began
        left = time_left(self._estimate_s, left_s, elapsed)
        eta = f", about {clock(left)} left" if left is not None else ""
        print(f"[{self._done + 1}/{self._total} {clock(elapsed)}{eta}] {job.label()}",
              file=self._stream, flush=True)

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        self._done += 1

    def job_not_run(self, job: Job, rows: Sequence[ResultRow]) -> None:
        """Not a line: the summary says what was skipped and why."""

    def stop(self) -> None:
        pass
