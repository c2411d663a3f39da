"""`bwprof salvage [--ranks N] RUN` (also `python -m bwprof.fleet.salvage [--ranks N] RUN`,
as scripts written before the subcommand call it): merge the ranks' own folders of a fleet
job whose merge never ran into RUN, afterwards.

A rank that dies (SIGKILL, out of memory) makes mpirun end every rank at once, rank 0
included; so does Ctrl-C or SIGTERM to mpirun on a loaded rank 0. RUN then holds only
`ranks/rank-NNNN/` (each rank writes its rows as it goes), which `bwprof report RUN`
refuses, naming this command. The merge is the one rank 0 writes (`bwprof.fleet.merge`),
each rank's fate what its folder says: `ok` or `failed` where it is final, `interrupted`
where a signal stopped it, `missing` (its finished rows kept) where it was cut short, and
`missing` without rows where there is no folder (a node-local disk). A merge rank 0 began
and did not finish (the job ended mid-merge: RUN reads as stopped without finishing, its
first system.json naming no rank's fate) is done again, whole.

The job's size is what the ranks' own system.json say (the run id rank 0 gave them all,
'HOST-TIME-mpiN'), held against the folders present: a size a run id claims far beyond
them (each rank that left no folder is an error row) is taken only where `--ranks N`
confirms it. Exit codes: 0 merged; 2 bad input or refused; 3 RUN cannot be written, or
memory or open files ran out; 130 interrupted (RUN is merged again whole by the next try).
Heavy modules load only once the stop signals are handled (`bwprof.entry` for the
subcommand, `_command` here). Both read the same `ranks_value`, `merged_line` and
`interrupted_detail`, so their lines and exit codes are one.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from bwprof.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    OUT_OF_FILES,
    BwprofError,
    OutputError,
)

if TYPE_CHECKING:
    from bwprof.fleet.merge import RankReport
    from bwprof.schema.meta import RankMeta

USAGE = ("usage: python -m bwprof.fleet.salvage [--ranks N] RUN (a fleet job's folder "
         "holding ranks/; --ranks confirms the job's size where few of its ranks left a "
         "folder there)")

UNCONFIRMED_RANKS = 1024
"""A job of up to this many ranks is merged as its run id says, whatever folders are there."""
RANKS_PER_FOLDER = 64
"""Beyond UNCONFIRMED_RANKS, the run id's size is taken without `--ranks` up to this many
ranks per folder present (a node-local RUN holds its node's ranks only): each rank with no
folder is an error row, and a run id that claimed 300,000 ranks over two folders made a
merge of 99 s and 2.1 GB."""
MAX_RANKS = 1_000_000
"""No job is larger, `--ranks` included (ten times the largest fleets there are)."""
RANK_FOLDER = re.compile(r"rank-([0-9]{4,7})")
"""A rank's folder as `bwprof.fleet.run.rank_dir` names it (no more digits than MAX_RANKS)."""
FATES = ("ok", "failed", "interrupted", "missing")
NAMED = 5
"""A fate other than `ok` names up to this many of its ranks in the closing line."""


def _timeout(command_line: Sequence[str]) -> float:
    """The job's --mpi-timeout, from the ranks' command line; else the default it ran under."""
    from bwprof.fleet.run import DEFAULT_TIMEOUT_S

    timeout = DEFAULT_TIMEOUT_S
    words = list(command_line)
    for index, word in enumerate(words):
        value = (words[index + 1] if word == "--mpi-timeout" and index + 1 < len(words)
                 else word.partition("=")[2] if word.startswith("--mpi-timeout=") else "")
        if re.fullmatch(r"[0-9]{1,7}(\.[0-9]{0,6})?", value):
            timeout = float(value)
    return timeout


def _job_size(run: Path, found: Sequence[int], reports: Mapping[int, RankReport],
              asked: int | None) -> int:
    """How many ranks the job had: the size in the run id every rank folder's system.json
    holds ('-mpiN': all the same, each folder's rank its own), else one past the highest
    rank folder; `asked` (--ranks) must agree with it. BwprofError where the folders
    disagree with each other or with it, or where it is far more than the folders present
    and not confirmed (`RANKS_PER_FOLDER`)."""
    from bwprof.fleet.run import rank_dir

    ids: dict[str, int] = {}
    for rank, report in reports.items():
        assert report.meta is not None
        ids.setdefault(report.meta.run_id or "", rank)
        if report.meta.mpi_rank is not None and report.meta.mpi_rank != rank:
            raise BwprofError(f"{rank_dir(run, rank)}/system.json says it is rank "
                              f"{report.meta.mpi_rank}: not this job's folder; move it out "
                              f"of {run / 'ranks'} and run it again")
    if len(ids) > 1:
        (one, first), (other, second) = list(ids.items())[:2]
        raise BwprofError(f"{rank_dir(run, first)} and {rank_dir(run, second)} are of "
                          f"different jobs (run ids {one!r} and {other!r}); move the other "
                          f"job's folders out of {run / 'ranks'} and run it again")
    run_id = next(iter(ids))
    sized = re.search(r"-mpi([0-9]{1,7})$", run_id)
    claimed = int(sized.group(1)) if sized else None
    least = found[-1] + 1
    said = f"the job's run id ({run_id}) says {claimed:,} rank(s)" if claimed is not None else ""
    if asked is not None and claimed is not None and asked != claimed:
        raise BwprofError(f"--ranks {asked} disagrees with the ranks' folders: {said}; pass "
                          f"--ranks {claimed}, or none")
    if claimed is not None and claimed < least:
        raise BwprofError(f"{rank_dir(run, found[-1])} is past the job's last rank ({said}): "
                          f"not this job's folder; move it out of {run / 'ranks'} and run it "
                          f"again")
    if asked is not None and asked < least:
        raise BwprofError(f"--ranks {asked} is fewer than the rank folders under "
                          f"{run / 'ranks'} (the highest is {rank_dir(run, found[-1]).name}); "
                          f"pass the job's size (mpirun -np)")
    size = asked if asked is not None else claimed if claimed is not None else least
    why = said or f"the rank folders go up to {rank_dir(run, found[-1]).name}"
    if size > MAX_RANKS:
        raise BwprofError(f"{why}: more than {MAX_RANKS:,}, no fleet's size; move the "
                          f"folders that are not this job's out of {run / 'ranks'}")
    if asked is None and size > max(UNCONFIRMED_RANKS, RANKS_PER_FOLDER * len(found)):
        raise BwprofError(f"{why} but only {len(found):,} rank folder(s) are under "
                          f"{run / 'ranks'}: copy the other nodes' rank-NNNN folders there "
                          f"(a node-local --out), or confirm the job's size with `bwprof salvage "
                          f"--ranks {size} {run}` (each rank without a folder is merged as "
                          f"missing)")
    return size


def _fates(ranks: Sequence[RankMeta]) -> str:
    """The ranks' fates counted ('10,860 ok, 2 failed (ranks 17, 9001), 8 missing (ranks 3,
    4, 5, 6, 7 and 3 more)'): one short line whatever the fleet's size."""
    counts = Counter(rank.status for rank in ranks)
    parts = []
    for fate in sorted(counts, key=lambda f: (FATES.index(f) if f in FATES else len(FATES), f)):
        part = f"{counts[fate]:,} {fate}"
        if fate != "ok":
            named = [str(rank.rank) for rank in ranks if rank.status == fate][:NAMED]
            more = f" and {counts[fate] - NAMED:,} more" if counts[fate] > NAMED else ""
            part += f" ({'rank' if counts[fate] == 1 else 'ranks'} {', '.join(named)}{more})"
        parts.append(part)
    return ", ".join(parts) or "no rank"


def _rank_folders(run: Path) -> list[int]:
    """The ranks whose folders RUN/ranks/ holds, as `rank_dir` names them (others are not
    this job's: left alone); BwprofError where RUN/ranks/ cannot be listed."""
    ranks = run / "ranks"
    try:
        children = list(os.scandir(ranks)) if ranks.is_dir() else []
    except OSError as exc:
        raise BwprofError(f"cannot read {ranks}: {exc.strerror or exc}; make it readable and "
                          f"run it again") from None
    return sorted(int(m.group(1)) for child in children
                  if (m := RANK_FOLDER.fullmatch(child.name))
                  and child.name == f"rank-{int(m.group(1)):04d}")


def _cannot_write(run: Path, path: Path, exc: OSError) -> BwprofError:
    """The one line for a write in RUN that failed: exit 3 (a link or a file that is not a
    regular one planted where the merge's lock goes: bad input, 2)."""
    if exc.errno in (errno.ELOOP, None) and path.name.endswith(".lock"):
        return BwprofError(f"{path} is a link or not a regular file, which bwprof never makes "
                           f"there; remove it and run it again")
    reason = exc.strerror or str(exc) or type(exc).__name__
    advice = ("free some space there and run it again" if exc.errno in (errno.ENOSPC,
                                                                        errno.EDQUOT)
              else "raise the open-file limit (ulimit -n) and run it again"
              if exc.errno in OUT_OF_FILES
              else f"make {run} writable (or merge a writable copy of it) and run it again")
    return OutputError(f"cannot write {path}: {reason}; the ranks' folders are untouched; "
                       f"{advice}")


@contextmanager
def _writing(run: Path, path: Path) -> Iterator[None]:
    """An OSError within it is `_cannot_write`'s one line about `path`."""
    try:
        yield
    except OSError as exc:
        raise _cannot_write(run, path, exc) from None


def salvage(run: Path, ranks_asked: int | None = None) -> str:
    """Merge RUN's rank folders into RUN; one line saying what was done. BwprofError (bad
    input) where RUN is no fleet folder, is merged already, its job still runs or its size
    is in doubt (`_job_size`); OutputError where RUN cannot be written."""
    from bwprof.fleet.merge import MergeStream, RankName
    from bwprof.fleet.run import MERGE_LOCK, fate_from_folder, rank_dir, read_rank_folder
    from bwprof.store import runlock

    found = _rank_folders(run)
    if not found:
        what = ("does not exist" if not os.path.lexists(run)
                else "is not a folder" if not run.is_dir() else "holds no ranks/rank-NNNN folder")
        raise BwprofError(f"{run} {what}: not a fleet job's folder; pass the --out of a "
                          "fleet run")
    if runlock.running(run):
        raise BwprofError(f"the fleet job that claimed {run} still runs; let it end (it "
                          "merges its ranks itself) or end it first")
    lock = run / "ranks" / MERGE_LOCK
    with ExitStack() as held:
        with _writing(run, lock):
            held.enter_context(runlock.waiting_for(lock))
        redone = _begun(run)
        reports = {rank: report for rank in found
                   if (report := read_rank_folder(run, rank)) is not None}
        if not reports:
            raise BwprofError(f"no rank folder under {run / 'ranks'} holds a readable "
                              "system.json: nothing to merge")
        size, merging = _job_size(run, found, reports, ranks_asked), len(reports)
        if redone:
            _clear_partial(run)
        first = next(iter(reports.values())).meta
        assert first is not None
        stream = MergeStream(run, first.run_id or run.name,
                             {rank: RankName.of(r) for rank, r in reports.items()}, size,
                             _timeout(first.command_line))
        try:
            for rank in sorted(reports):
                report = reports.pop(rank)  # merged: its rows need not stay in memory
                if fate_from_folder(report):
                    report.missing_note = (f"rank {rank}'s folder was not final when the job "
                                           f"ended (killed, stopped or hung); its "
                                           f"{len(report.rows)} finished row(s) are kept")
                report.notes.append(f"read from its folder, {rank_dir(run, rank)}, after the "
                                    f"job")
                stream.add(report)
            stream.finalise(first)  # every folder read: final, as rank 0's merge makes it
        except BaseException:
            stream.abandon()
            raise
        stream.close()
        merged = stream.result({"plots": False})
    again = "; the merge rank 0 began, cut short, is done again whole" if redone else ""
    fates = _fates(merged.meta.mpi.ranks if merged.meta.mpi else ())
    return (f"merged {merging:,} rank folder(s) into {run}, a job of {size:,} rank(s): "
            f"{fates}{again}; `bwprof report {run}` reads it")


def _partial() -> tuple[str, ...]:
    """What a merge rank 0 began and did not finish may have left in RUN, taken away before
    the merge is done again (system.json is replaced)."""
    from bwprof.analysis.summary import SUMMARY_FILE
    from bwprof.store.export import (
        FINDINGS_FILE,
        RESULTS_FILE,
        SAMPLES_FILE,
        TIMELINES_FILE,
        TIMINGS_FILE,
    )
    from bwprof.store.runfolder import RESULTS_PARQUET

    return (RESULTS_FILE, TIMINGS_FILE, SAMPLES_FILE, FINDINGS_FILE, TIMELINES_FILE,
            RESULTS_PARQUET, SUMMARY_FILE)


def _begun(run: Path) -> bool:
    """Whether rank 0's merge began in RUN and was cut short (its first system.json, never
    finalised, names no rank's fate: the job ended mid-merge); False where it never began.
    BwprofError where RUN holds a finished merge, or merged files without a system.json
    that says which."""
    from bwprof.fleet.run import read_meta_or_none
    from bwprof.store.export import RESULTS_FILE, SYSTEM_FILE

    system = run / SYSTEM_FILE
    if not (os.path.lexists(system) or os.path.lexists(run / RESULTS_FILE)):
        return False
    meta = read_meta_or_none(system)
    if meta is None or meta.mpi is None or meta.mpi.ranks or meta.state != "incomplete":
        raise BwprofError(f"{run} is merged already; `bwprof report {run}` reads it")
    return True


def _clear_partial(run: Path) -> None:
    """Take away what the merge cut short left (`_begun`), before it is done again."""
    for name in _partial():
        with _writing(run, run / name):
            (run / name).unlink(missing_ok=True)  # a link is removed, never followed


def ranks_value(text: str) -> int | None:
    """--ranks N as a number, None where N is not a whole number from 1 to MAX_RANKS written in
    digits alone (no sign, underscore, space or fraction)."""
    if not re.fullmatch(r"[0-9]{1,7}", text) or not 0 < int(text) <= MAX_RANKS:
        return None
    return int(text)


def _arguments(argv: Sequence[str]) -> tuple[Path, int | None] | None:
    """(RUN, --ranks N or None), None where the command line is not the usage's."""
    words, asked = list(argv), None
    if words and words[0].startswith("--ranks"):
        value = (words[0].partition("=")[2] if words[0].startswith("--ranks=")
                 else words.pop(1) if words[0] == "--ranks" and len(words) > 1 else "")
        words.pop(0)
        asked = ranks_value(value)
        if asked is None:
            return None
    if len(words) != 1 or words[0].startswith("-"):
        return None
    return Path(words[0]), asked


def interrupted_detail(run: Path) -> str:
    """What the interrupted line says after 'interrupted': RUN's state and what to do."""
    return (f": {run} is not merged (the ranks' folders are untouched); run it again to "
            f"merge it")


def merged_line(run: Path, ranks_asked: int | None = None) -> str:
    """`salvage`, where memory or a write no step named running out is an OutputError (exit 3)
    whose line says the ranks' folders are untouched; KeyboardInterrupt is left to the caller
    (`interrupted_detail`)."""
    try:
        return salvage(run, ranks_asked)
    except MemoryError:
        raise OutputError(f"bwprof ran out of memory merging {run} (the ranks' folders are "
                          f"untouched); give it more memory and run it again") from None
    except OSError as exc:  # a write the steps did not name (a spool file, /tmp)
        raise OutputError(f"cannot merge {run}: {exc.strerror or exc} (the ranks' folders "
                          f"are untouched); free the space or raise the limit it names and "
                          f"run it again") from None


def main(argv: Sequence[str]) -> int:
    """The module command: 0 once RUN is merged (the ranks' fates are in it), 2 on bad input
    or a size in doubt, 3 where RUN cannot be written or memory or open files ran out, 130
    where a stop signal ended it (RUN is then merged again whole by the next try)."""
    parsed = _arguments(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return EXIT_USAGE
    run, asked = parsed
    try:
        said = merged_line(run, asked)
    except KeyboardInterrupt:
        from bwprof.entry import interrupted_message

        print(interrupted_message(interrupted_detail(run)), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BwprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(said)
    return EXIT_OK


def _command() -> int:
    """`python -m bwprof.fleet.salvage`: stop signals handled (one line and 130, never a
    traceback) before the heavy modules load, as `bwprof` itself does."""
    from bwprof.entry import interrupted_message, prepare_process

    try:
        prepare_process()
        return main(sys.argv[1:])
    except KeyboardInterrupt:  # while the handlers went in, or a second signal
        print(interrupted_message(), file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(_command())
