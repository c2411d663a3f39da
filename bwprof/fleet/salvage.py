"""`python -m bwprof.fleet.salvage RUN`: merge the ranks' own folders of a fleet job whose
merge never ran into RUN, afterwards.

A rank that dies (SIGKILL, out of memory) makes mpirun end every rank at once, rank 0
included; so does Ctrl-C or SIGTERM to mpirun on a loaded rank 0. RUN then holds only
`ranks/rank-NNNN/` (each rank writes its rows as it goes), which `bwprof report RUN`
refuses, naming this command. The merge is the one rank 0 writes (`bwprof.fleet.merge`),
each rank's fate what its folder says: `ok` or `failed` where it is final, `interrupted`
where a signal stopped it, `missing` (its finished rows kept) where it was cut short, and
`missing` without rows where there is no folder (a node-local disk). A merge rank 0 began
and did not finish (the job ended mid-merge: RUN reads as stopped without finishing, its
first system.json naming no rank's fate) is done again, whole.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from bwprof.analysis.summary import SUMMARY_FILE
from bwprof.errors import EXIT_OK, EXIT_USAGE, BwprofError
from bwprof.fleet.merge import MergeStream, RankName, RankReport
from bwprof.fleet.run import (
    DEFAULT_TIMEOUT_S,
    MERGE_LOCK,
    _read_folder,
    _read_meta,
    rank_dir,
)
from bwprof.store import runlock
from bwprof.store.export import (
    FINDINGS_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    SYSTEM_FILE,
    TIMELINES_FILE,
    TIMINGS_FILE,
)
from bwprof.store.runfolder import RESULTS_PARQUET

USAGE = "usage: python -m bwprof.fleet.salvage RUN (a fleet job's folder holding ranks/)"


def _job_shape(run_id: str | None, command_line: Sequence[str], highest: int
               ) -> tuple[int, float]:
    """(ranks in the job, its --mpi-timeout): the size from the run id a fleet run gives
    its ranks ('HOST-TIME-mpi8'), else one past the highest rank folder; the timeout from
    the ranks' command line, else the default it then ran under."""
    sized = re.search(r"-mpi([0-9]{1,7})$", run_id or "")
    size = max(int(sized.group(1)), highest + 1) if sized else highest + 1
    timeout = DEFAULT_TIMEOUT_S
    words = list(command_line)
    for index, word in enumerate(words):
        value = (words[index + 1] if word == "--mpi-timeout" and index + 1 < len(words)
                 else word.partition("=")[2] if word.startswith("--mpi-timeout=") else "")
        if re.fullmatch(r"[0-9]{1,7}(\.[0-9]{0,6})?", value):
            timeout = float(value)
    return size, timeout


def _fate(report: RankReport) -> None:
    """A rank's fate as its own folder says it (see the module's docstring)."""
    assert report.meta is not None
    meta = report.meta
    if meta.interrupted:
        stopped = meta.stopped_by or "interrupted"
        if stopped.startswith(("error", "output error")):
            report.error = stopped
        else:
            report.interrupted = stopped
    elif meta.state != "finished":
        report.missing = True
        report.missing_note = (f"rank {report.rank}'s folder was not final when the job "
                               f"ended (killed, stopped or hung); its {len(report.rows)} "
                               f"finished row(s) are kept")


def salvage(run: Path) -> str:
    """Merge RUN's rank folders into RUN; one line saying what was done. BwprofError (bad
    input) where RUN is no fleet folder, is merged already or its job still runs."""
    ranks = run / "ranks"
    found = sorted(int(m.group(1)) for child in (ranks.iterdir() if ranks.is_dir() else ())
                   if (m := re.fullmatch(r"rank-([0-9]{4,})", child.name)))
    if not found:
        raise BwprofError(f"{run} holds no ranks/rank-NNNN folder: not a fleet job's folder; "
                          "pass the --out of a fleet run")
    if runlock.running(run):
        raise BwprofError(f"the fleet job that claimed {run} still runs; let it end (it "
                          "merges its ranks itself) or end it first")
    with runlock.waiting_for(ranks / MERGE_LOCK):
        redone = _begun(run)
        reports = {rank: report for rank in found
                   if (report := _read_folder(run, rank)) is not None}
        if not reports:
            raise BwprofError(f"no rank folder under {ranks} holds a readable system.json: "
                              "nothing to merge")
        first = next(iter(reports.values())).meta
        assert first is not None
        size, timeout_s = _job_shape(first.run_id, first.command_line, found[-1])
        stream = MergeStream(run, first.run_id or run.name,
                             {rank: RankName.of(r) for rank, r in reports.items()}, size,
                             timeout_s)
        try:
            for rank in sorted(reports):
                _fate(reports[rank])
                reports[rank].notes.append(f"read from its folder, {rank_dir(run, rank)}, "
                                           f"after the job")
                stream.add(reports[rank])
            if stream.first is None:  # rank 0 left no folder: the first rank's, as the run's
                stream.first = first
        except BaseException:
            stream.abandon()
            raise
        stream.close()
        merged = stream.result({"plots": False})
    fates = ", ".join(f"rank {r.rank} {r.status}" for r in (merged.meta.mpi.ranks
                                                             if merged.meta.mpi else ()))
    again = "; the merge rank 0 began, cut short, is done again whole" if redone else ""
    return (f"merged {len(reports)} rank folder(s) into {run} ({fates}){again}; "
            f"`bwprof report {run}` reads it")


PARTIAL = (RESULTS_FILE, TIMINGS_FILE, SAMPLES_FILE, FINDINGS_FILE, TIMELINES_FILE,
           RESULTS_PARQUET, SUMMARY_FILE)
"""What a merge rank 0 began and did not finish may have left in RUN, taken away before the
merge is done again (system.json is replaced)."""


def _begun(run: Path) -> bool:
    """Whether rank 0's merge began in RUN and was cut short (its first system.json, never
    finalised, names no rank's fate: the job ended mid-merge), its files now taken away;
    False where it never began. BwprofError where RUN holds a finished merge, or merged
    files without a system.json that says which."""
    system = run / SYSTEM_FILE
    if not (os.path.lexists(system) or os.path.lexists(run / RESULTS_FILE)):
        return False
    meta = _read_meta(system)
    if meta is None or meta.mpi is None or meta.mpi.ranks or meta.state != "incomplete":
        raise BwprofError(f"{run} is merged already; `bwprof report {run}` reads it")
    for name in PARTIAL:
        (run / name).unlink(missing_ok=True)  # a link is removed, never followed
    return True


def main(argv: Sequence[str]) -> int:
    """The command: 0 once RUN is merged (the ranks' fates are in it), 2 on bad input, 3
    where RUN cannot be written."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return EXIT_USAGE
    try:
        said = salvage(Path(argv[0]))
    except BwprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"error: cannot merge {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    print(said)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
