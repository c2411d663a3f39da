"""Progress of a run on the terminal: a live bar, or one line per job for a log. The runner
calls these (`bwprof.runner.ProgressListener`); the CLI chooses one."""

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


class RichProgress:
    """Progress bar on stderr, one step per job, naming the job that runs now."""

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

    def start(self, total: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("starting", total=total)

    def job_started(self, job: Job) -> None:
        if self._task is not None:
            self._progress.update(self._task, description=job.label())

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        if self._task is not None:
            self._progress.advance(self._task)

    def stop(self) -> None:
        if self._task is not None:
            self._progress.stop()


class LineProgress:
    """Progress for a log: one plain line per job as it starts, where a live bar cannot be
    drawn (stderr is a file or pipe, or a fleet rank's pseudo-terminal behind mpirun)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._total = self._done = 0
        self._began = time.monotonic()

    def start(self, total: int) -> None:
        self._total, self._done, self._began = total, 0, time.monotonic()

    def job_started(self, job: Job) -> None:
        elapsed = int(time.monotonic() - self._began)
        print(f"[{self._done + 1}/{self._total} {elapsed // 60}:{elapsed % 60:02d}] "
              f"{job.label()}", file=self._stream, flush=True)

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        self._done += 1

    def stop(self) -> None:
        pass
