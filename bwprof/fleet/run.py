"""A fleet run: every MPI rank measures its own node, rank 0 merges everything into one run
folder.

1. Rank 0 checks every option and creates the run folder; every rank learns the outcome, so
   bad input stops the job at once with one line (from rank 0).
2. Each rank runs its share through `bwprof.run`: with several ranks on a node, each takes
   the GPU of its local rank and only local rank 0 runs the host (DDR) cases; the collective
   case (net_p2p) runs first on every rank. Each rank writes its own folder,
   `RUN/ranks/rank-NNNN/`, as it goes: ranks never write into the same file, and an
   interrupted job keeps what every rank measured.
3. Every rank sends its rows, samples, findings and metadata to rank 0, which writes the
   merged `results.csv` (with `host` and `rank`), `samples.csv`, `findings.csv` (the ranks'
   and the fleet's), `system.json` (every node) and the summary; its notes say which rank
   pairs net_p2p measured and why (`bwprof.fleet.pairs`). A rank that failed sends an
   `error` row with its message; a rank that does not report within the timeout gets one, and
   rank 0 then ends the job rather than wait forever. The merge itself (`bwprof.fleet.merge`)
   needs no MPI and writes through the same writer as a single run. Where rank 0 goes silent
   (stopped, hung) before its merge, the first rank to give up on it merges the ranks' own
   folders in its place; where the whole job ended first, `python -m bwprof.fleet.salvage
   RUN` does it afterwards.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from bwprof import api, interrupts
from bwprof.coerce import integer
from bwprof.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OUTPUT,
    BwprofError,
    OutputError,
    RunInterrupted,
)
from bwprof.fleet.comm import HURRIED_WAIT_S, Fleet, FleetTimeout, import_mpi
from bwprof.fleet.merge import MergeStream, RankName, RankReport
from bwprof.fleet.netp2p import NetP2PExecutor, cuda_aware_mpi
from bwprof.fleet.pairs import groups_of, read_groups, slurm_switch, topology_groups
from bwprof.gpushare import gpu_share
from bwprof.measurement import Job
from bwprof.paths import user_path
from bwprof.render.timeline import read_timelines
from bwprof.runner import ProgressListener, not_run, takes_not_run
from bwprof.schema.meta import AFTER_EVERY_CASE, RunMeta
from bwprof.schema.reading import MissingFile
from bwprof.schema.rows import ResultRow
from bwprof.schema.table import read_run_csv
from bwprof.store.export import (
    FINDINGS_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    SYSTEM_FILE,
    TIMINGS_FILE,
    prepare_run_dir,
    write_system_json,
)
from bwprof.store.runfolder import read_system
from bwprof.store.runlock import waiting_for
from bwprof.system import host_info

DEFAULT_TIMEOUT_S = 1800.0


class QuietExit(Exception):
    """A rank other than 0 stops because rank 0 refused the run (rank 0 says why)."""


class InjectedFailure(RuntimeError):
    """`--fail-rank`: a rank made to fail on purpose, to test what the fleet does then."""


class _PassingOn:
    """A progress listener that passes the run's events on to `inner` (or to none), and
    takes the jobs that cannot run apart as `inner` does (`runner.takes_not_run`), so that
    both count the same jobs."""

    inner: ProgressListener | None

    def start(self, total: int, estimate_s: float | None = None) -> None:
        if self.inner is not None:
            self.inner.start(total, estimate_s)

    @property
    def takes_not_run(self) -> bool:
        return self.inner is None or takes_not_run(self.inner)


class FailAtFirstLocalJob(_PassingOn):
    """Progress listener that raises at this rank's first non-collective job (`--fail-rank`),
    after the collective case, so its peers are not left waiting; or, with `hang`
    (`--hang-rank`), never returns from it, as a rank stuck in a driver call would."""

    def __init__(self, inner: ProgressListener | None, hang: bool = False,
                 rank: int = 0) -> None:
        self.inner, self.hang, self.rank = inner, hang, rank

    def job_started(self, job: Job, left_s: float | None = None) -> None:
        self._inject(job)
        if self.inner is not None:
            self.inner.job_started(job, left_s)

    def job_not_run(self, job: Job, rows: Sequence[ResultRow]) -> None:
        """A case this rank cannot run (a host case another rank of its node measures):
        its first local job all the same."""
        self._inject(job)
        if self.inner is not None:
            not_run(self.inner, job, rows)

    def _inject(self, job: Job) -> None:
        measured = _measured_before_the_hang() if self.hang else ("net_p2p",)
        try:
            while self.hang and job.case not in measured:
                time.sleep(1)  # silent from now on: no heartbeat, no result
        except KeyboardInterrupt:  # a stop signal: the stuck call returns, maybe late
            _test_delay(self.rank, "job")
            raise
        if job.case not in measured:
            raise InjectedFailure("failure injected by --fail-rank (a test of fleet errors)")

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        if self.inner is not None:
            self.inner.job_finished(job, rows)


def _measured_before_the_hang() -> tuple[str, ...]:
    """The cases `--hang-rank` measures before it hangs: net_p2p (collective: its peers are
    not left waiting), and those a test names in BWPROF_FLEET_TEST_HANG_AFTER ('h2d_pinned'),
    so the hung rank has rows of a local case, without net_p2p's sweep."""
    asked = os.environ.get("BWPROF_FLEET_TEST_HANG_AFTER", "")
    return ("net_p2p", *filter(None, asked.split(",")))


class Heartbeat(_PassingOn):
    """Progress listener that tells the ranks waiting for this one that it is alive, at every
    job's start and end (see Fleet.heartbeat), and passes the events on."""

    def __init__(self, fleet: Fleet, inner: ProgressListener | None) -> None:
        self.fleet, self.inner = fleet, inner

    def job_started(self, job: Job, left_s: float | None = None) -> None:
        """Also, on a rank other than 0, stop measuring once rank 0 went silent a whole
        timeout (a net_p2p job's wait gave up on it): rank 0 can merge nothing more, and the
        rank's next step waits for it, so measuring on only delayed the job's end by the
        rest of the plan (86 s, not the timeout, on a loaded box). The rows finished stay
        in the rank's own folder."""
        gone = self.fleet.silent(0) if self.fleet.rank != 0 else None
        if gone is not None:
            raise FleetTimeout(f"rank {self.fleet.rank} stopped measuring: rank 0 went "
                               f"silent ({gone})")
        self.fleet.heartbeat()
        if self.inner is not None:
            self.inner.job_started(job, left_s)

    def job_finished(self, job: Job, rows: Sequence[ResultRow]) -> None:
        self.fleet.heartbeat()
        if self.inner is not None:
            self.inner.job_finished(job, rows)

    def job_not_run(self, job: Job, rows: Sequence[ResultRow]) -> None:
        self.fleet.heartbeat()
        if self.inner is not None:
            not_run(self.inner, job, rows)


class BudgetVote:
    """`--budget` in a fleet: every rank takes the budget steps of the rank whose plan, as
    asked, is estimated longest (it sets the job's length), so every rank runs the same
    net_p2p jobs (sizes, repeats); ranks that fitted their own plans waited on each other
    until --mpi-timeout. Collective: every rank votes once, a rank that failed before its
    plan was fitted abstains (`abstain`), so the steps after it stay in step."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet, self.voted = fleet, False

    def __call__(self, asked_s: float | None, steps: tuple[int, ...]) -> tuple[int, ...] | None:
        self.voted = True
        # Held from stop signals: a rank stopped between the gather and the broadcast would
        # leave its collectives one behind rank 0's (every later step's messages mismatched).
        with interrupts.deferred():
            votes = self.fleet.gather(None if asked_s is None else (asked_s, steps),
                                      "the --budget plan")
            chosen = None
            if votes is not None:
                valid = [(vote[0], -rank, tuple(vote[1])) for rank, vote in votes.items()
                         if isinstance(vote, tuple) and len(vote) == 2]
                chosen = max(valid)[2] if valid else None
            return self.fleet.bcast(chosen, "the --budget plan")

    def abstain(self) -> None:
        if not self.voted:
            self(None, ())


def rank_dir(run_dir: Path, rank: int) -> Path:
    return run_dir / "ranks" / f"rank-{rank:04d}"


def _records(path: Path, notes: list[str]) -> list[dict[str, object]]:
    """The records of one of this rank's tables, read as `report` reads a run's (bounded, a
    torn last line left out, the spreadsheet apostrophes undone: the merged writer escapes
    them again); none where the file is missing, none and a note where it is damaged."""
    try:
        frame = read_run_csv(path, notes)
    except MissingFile:
        return []
    except BwprofError as exc:
        notes.append(f"{path.name} is left out of the merge: {exc}")
        return []
    return [{str(k): v for k, v in record.items()} for record in frame.to_dict("records")]


def _stopped_once_merged(merged: api.RunResult, signalled: str) -> None:
    """A stop signal held while rank 0 wrote the merged folder, once every rank had
    reported: the folder is whole, and its system.json says what stopped it as a single
    run's does when a signal comes while it writes its final files ('SIGTERM after every
    case was measured', which reading takes as finished), so the folder and the job's exit
    130 agree."""
    merged.interrupted = True
    merged.meta = replace(merged.meta, interrupted=True,
                          stopped_by=f"{signalled} {AFTER_EVERY_CASE}")
    if merged.run_dir is not None:
        write_system_json(merged.run_dir, merged.meta)
    merged.notes.append("note: the signal came once every rank had reported: the merged "
                        "folder is whole")


def run_fleet(
    *, out: Path | None, timeout_s: float = DEFAULT_TIMEOUT_S, fail_rank: int | None = None,
    hang_rank: int | None = None, all_pairs: bool = False, groups: Path | None = None,
    progress: ProgressListener | None = None, command_line: Sequence[str] | None = None,
    **options: Any,
) -> api.RunResult | None:
    """Run this rank's share; on rank 0 return the merged RunResult, elsewhere None.
    `all_pairs` and `groups` (a `--groups` file, read on rank 0) choose net_p2p's pairs. A
    collective step that times out (the rank waited for went silent for the whole timeout,
    heartbeats included) ends the job with one line: rank 0 says which step and that a rank
    hangs, another rank that rank 0 hangs; what each rank measured is in its own folder."""
    from bwprof.gpu.runtime import ask_for_hardware_queues

    ask_for_hardware_queues()  # before MPI starts: a CUDA-aware MPI may start CUDA
    fleet = Fleet.join(timeout_s)
    announcing = _announce_stops(fleet)
    try:
        return _take_part(fleet, out, timeout_s, fail_rank, hang_rank, progress, command_line,
                          {**options, "all_pairs": all_pairs, "groups": groups})
    except FleetTimeout as exc:
        if fleet.rank == 0:
            print(f"error: {exc}: a rank hangs or died; ending the job", file=sys.stderr,
                  flush=True)
        else:
            print(f"error: {exc}: rank 0 hangs (or one of its jobs outlasted --mpi-timeout); "
                  f"what this rank measured is in its RUN/ranks/rank-{fleet.rank:04d} folder; "
                  f"ending the job", file=sys.stderr, flush=True)
        fleet.abort(1)  # an exit would leave MPI owing sends, and the others waiting
        raise SystemExit(1) from None
    finally:
        for signum, handler in announcing.items():
            with suppress(OSError, ValueError):
                signal.signal(signum, handler)
        interrupts.unhold()


def _announce_stops(fleet: Fleet) -> dict[int, Any]:
    """On a rank other than 0, the stop signals' handlers first tell rank 0 and the rank's
    net_p2p peers that the signal came (`Fleet.announce_stop`), then handle it as before;
    the handlers replaced, to put
    back. Only where a handler of Python's is in (bwprof's, in the main thread)."""
    replaced: dict[int, Any] = {}
    if fleet.rank == 0 or threading.current_thread() is not threading.main_thread():
        return replaced
    for signum in interrupts.handled():
        previous = signal.getsignal(signum)
        if not callable(previous):
            continue

        def announce(number: int, frame: Any, previous: Any = previous) -> None:
            fleet.announce_stop(signal.Signals(number).name)
            previous(number, frame)

        with suppress(OSError, ValueError):
            signal.signal(signum, announce)
            replaced[signum] = previous
    return replaced


def _take_part(fleet: Fleet, out: Path | None, timeout_s: float, fail_rank: int | None,
               hang_rank: int | None, progress: ProgressListener | None,
               command_line: Sequence[str] | None,
               options: dict[str, Any]) -> api.RunResult | None:
    """This rank's part of a fleet run (see the module's docstring for the steps): rank 0
    claims the run folder, and holds it until the merged files are written."""
    problem, run_id, claim = None, None, None
    try:  # every rank its own options: a launch may give ranks different ones (MPMD)
        api.check_options(host_info(), fleet=True, **{k: options[k] for k in (
            "cases", "preset", "repeats", "threads", "size", "sample_interval_ms",
            "file_format")})
    except BwprofError as exc:
        problem = str(exc)
    refused = fleet.gather(problem, "every rank's options")
    if fleet.rank == 0:
        problem = next((text if rank == 0 else f"rank {rank}'s options: {text}"
                        for rank, text in sorted((refused or {}).items()) if text), None)
    if fleet.rank == 0 and problem is None:
        try:
            if options.get("groups") is not None:  # the map goes to every rank, not the path
                options["groups"] = read_groups(user_path(options["groups"], "--groups"))
            started = api.utc_now()
            host = api.hostname()  # not UTF-8: escaped, as every row carries it
            run_id = f"{host}-{started:%Y%m%dT%H%M%SZ}-mpi{fleet.size}"
            if out is not None:  # the top folder is claimed as a single run's is
                claim = prepare_run_dir(user_path(out, "--out"))
            else:
                default = api.default_run_dir(host, started)
                claim = prepare_run_dir(default.with_name(f"{default.name}-mpi{fleet.size}"),
                                        unique=True)
            out = claim.folder
        except BwprofError as exc:
            problem = str(exc)
    try:
        return _measure_share(fleet, out, run_id, problem, timeout_s, fail_rank, hang_rank,
                              progress, command_line, options)
    finally:
        if claim is not None:
            claim.release()


def _measure_share(fleet: Fleet, out: Path | None, run_id: str | None, problem: str | None,
                   timeout_s: float, fail_rank: int | None, hang_rank: int | None,
                   progress: ProgressListener | None, command_line: Sequence[str] | None,
                   options: dict[str, Any]) -> api.RunResult | None:
    """Steps 2 and 3 for this rank, once rank 0 said whether the run may start."""
    from bwprof.gpu.runtime import probe

    problem, run_id, out = fleet.bcast((problem, run_id, out), "the start of the run")
    if problem:
        if fleet.rank == 0:
            raise BwprofError(problem)
        raise QuietExit(problem)
    assert out is not None and run_id is not None
    # Every rank has the same command line, so all know whether rank 0 read a --groups file.
    groups = (fleet.bcast(options["groups"] if fleet.rank == 0 else None, "the --groups")
              if options.get("groups") is not None else None)

    gpu_count = probe().count if not options.get("simulate") else 2
    share = gpu_share(fleet.local_rank, fleet.local_size, gpu_count)
    gpus_here = list(range(gpu_count)) if share is None else share
    gathered = fleet.gather((len(gpus_here), fleet.host, slurm_switch(os.environ)),
                            "the GPU counts")
    peers = fleet.bcast([gathered.get(r, (0, "?", None)) for r in range(fleet.size)]
                        if gathered else None, "the GPU counts")
    counts, hosts = [count for count, _, _ in peers], [host for _, host, _ in peers]
    if groups is None:  # no --groups file: Slurm's switches, where it knows them
        groups = topology_groups(hosts, [switch for _, _, switch in peers]) or None
    aware = fleet.bcast(cuda_aware_mpi(import_mpi().Get_library_version())
                        if fleet.rank == 0 else None, "CUDA-awareness")
    report = RankReport(fleet.rank, fleet.host, fleet.local_rank, fleet.local_size, gpus_here,
                        fleet.local_rank == 0)
    folder = rank_dir(out, fleet.rank)
    known, unlisted = groups_of(hosts, groups) if groups else ({}, [])
    executor = NetP2PExecutor(fleet, counts, aware, _rank_gpu(gpus_here, options),
                              hosts=hosts, seed=run_id, all_pairs=options["all_pairs"],
                              groups=known or None)
    pair_notes = [f"net_p2p: {executor.pairs.note}"] + (
        [f"net_p2p groups: {len(set(known.values()))} leaf switch(es) of Slurm's topology "
         "(SLURM_TOPOLOGY_ADDR)"] if known and options.get("groups") is None else []) + (
        [f"--groups: {len(unlisted)} node(s) not in the file, each taken as a group of its "
         f"own: {', '.join(unlisted[:5])}{' ...' if len(unlisted) > 5 else ''}"]
        if unlisted else [])
    shown = progress if fleet.rank == 0 else None  # only rank 0 prints
    injected = fleet.rank in (fail_rank, hang_rank)  # tests of fleet errors
    listener = Heartbeat(fleet, FailAtFirstLocalJob(shown, hang=fleet.rank == hang_rank,
                                                    rank=fleet.rank)
                         if injected else shown)
    vote = BudgetVote(fleet)
    try:
        result = api.run(
            out=folder, progress=listener, command_line=command_line, plots=False,
            fleet=api.FleetShare(fleet.rank, share, fleet.local_rank == 0, executor, run_id,
                                 vote),
            **{k: v for k, v in options.items()
               if k not in ("plots", "unique_out", "all_pairs", "groups")},
        )
        report.meta = result.meta
    except KeyboardInterrupt as exc:  # a stop signal: what it measured still goes to rank 0
        if isinstance(exc, RunInterrupted):
            report.meta = exc.result.meta
        report.interrupted = interrupts.received() or "KeyboardInterrupt"
    except FleetTimeout as exc:
        report.error = f"{exc}"
    except BwprofError as exc:  # e.g. the rank's folder is on a full disk: one line
        report.error = str(exc)
        report.meta = read_meta_or_none(folder / SYSTEM_FILE)
    except Exception as exc:  # the rank failed: keep what it measured, say why
        report.error = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        report.meta = read_meta_or_none(folder / SYSTEM_FILE)
        if not isinstance(exc, InjectedFailure):
            traceback.print_exc()
    interrupts.hold()  # every rank takes the last steps: a stop signal now only counts
    if options.get("budget_s") is not None:
        try:
            vote.abstain()  # failed before its plan was fitted: the others wait for its vote
        except FleetTimeout as exc:
            report.error = report.error or f"{exc}"
    _read_own(folder, report)
    _test_delay(fleet.rank, "finish")

    report.interrupted = report.interrupted or interrupts.received()
    # Rank 0 merges as a stream (its memory does not grow with the fleet): every rank's
    # name first (a rank's node name depends on the others'), then one report at a time.
    hurry = lambda: interrupts.received() is not None  # noqa: E731
    if fleet.rank != 0:
        _report_to_rank_0(fleet, report, out, run_id, timeout_s, options, hurry)
        return None
    names = fleet.gather(RankName.of(report), "every rank's name", hurry=hurry)
    report.interrupted = report.interrupted or interrupts.received()  # while it gathered
    stream = (MergeStream(out, run_id, names, fleet.size, timeout_s) if names is not None
              else None)  # rank 0's
    failed: list[Exception] = []
    stopped: list[int] = []  # ranks that reported a stop signal: the job's code is 130
    salvaged: list[int] = []  # ranks that sent nothing, whose own folders rank 0 read

    def take(rank: int, received: RankReport) -> None:
        """Merge one rank's report; after a failure receive the rest all the same (the
        ranks are sending), and raise it once all are in. The ranks before it that sent
        nothing go in first, from their own folders where rank 0 can read them."""
        salvage_until(rank)
        if received.interrupted:
            stopped.append(rank)
        if stream is not None and not failed:
            try:
                stream.add(received)
            except Exception as exc:  # raised again below, once every rank has sent
                failed.append(exc)

    looked = [0]  # the ranks before it were merged, or looked for in their folders

    def salvage_until(until: int) -> None:
        if stream is None or failed:
            return
        for lost in range(max(stream.next, looked[0]), until):
            looked[0] = lost + 1
            found = _salvage(out, lost, fleet.stopped_ranks)
            if found is not None:
                salvaged.append(lost)
                take(lost, found)

    reported = fleet.stream(report, "every rank's results", take,
                            sources=sorted(names or {}), hurry=hurry)
    salvage_until(fleet.size)
    code = EXIT_FAILED  # what the others exit with if the merge raises
    try:
        with fleet.beating():  # a long merge is no hang to the ranks waiting for its end
            assert stream is not None
            if failed:
                stream.abandon()
                raise failed[0]
            stream.close()
            merged = stream.result(options)
        signalled = interrupts.received()
        if signalled and not merged.interrupted:  # held while it merged
            _stopped_once_merged(merged, signalled)
        code = job_code(merged)
    except OutputError as exc:
        code = EXIT_OUTPUT
        if stopped or interrupts.received():  # 130 before 3 (docs/fleet.md), as job_code
            code = exc.exit_code = EXIT_INTERRUPTED
        raise
    finally:
        fleet.bcast(code, "the merged folder")
        fleet.drain()
    if executor.pairs.pairs and any(r.case == "net_p2p" for r in merged.rows):
        merged.notes[:0] = pair_notes
    missing = sorted(set(range(fleet.size)) - set(reported or []))
    if missing:  # a rank hangs: end the job instead of waiting for it forever
        how = (f"interrupted ({merged.meta.stopped_by or interrupts.received()})"
               if merged.interrupted else "error")
        lost = [rank for rank in missing if rank not in salvaged]
        kept = (f"merged the finished rows of rank(s) {', '.join(map(str, salvaged))} from "
                f"their own folders" + ("" if not lost else f", rank(s) "
                                        f"{', '.join(map(str, lost))} lost")
                if salvaged else "lost")
        print(f"{how}: rank(s) {', '.join(map(str, missing))} did not report within "
              f"{timeout_s:g} s (or {HURRIED_WAIT_S:g} s after a stop signal): {kept}; "
              f"wrote what the others measured to {out}; ending the job", file=sys.stderr,
              flush=True)
        fleet.abort(code)
    if merged.interrupted:
        raise RunInterrupted(merged)
    return merged


def _report_to_rank_0(fleet: Fleet, report: RankReport, out: Path, run_id: str,
                      timeout_s: float, options: dict[str, Any],
                      hurry: Callable[[], bool]) -> None:
    """Step 3 on a rank other than 0: its name, then its report, then rank 0's word that the
    merged folder is written and the job's exit code, which it exits with. Where rank 0 went
    silent a whole timeout before it began its merge, this rank merges the ranks' folders
    in its place (`_merge_for_rank_0`) and ends the job."""
    try:
        fleet.gather(RankName.of(report), "every rank's name", hurry=hurry)
        fleet.stream(report, "every rank's results", lambda rank, value: None, hurry=hurry)
        code = fleet.bcast(None, "the merged folder")
    except FleetTimeout as exc:
        if fleet.silent(0) is not None:
            ended = _merge_for_rank_0(fleet.rank, fleet.size, report, out, run_id, timeout_s,
                                      options, fleet.stopped_ranks())
            if ended is not None:
                code, said = ended
                print(f"error: {exc}: rank 0 hangs, was stopped or died before its merge; "
                      f"{said}; ending the job", file=sys.stderr, flush=True)
                fleet.abort(code)  # ends rank 0 too: it merges nothing more
                raise SystemExit(code) from None
        raise
    fleet.drain()
    if not isinstance(code, int):  # no word from rank 0 (not sent): this rank's own
        code = EXIT_INTERRUPTED if interrupts.received() else EXIT_OK
    if code:  # rank 0's: a signal after this rank reported does not change the job's
        raise SystemExit(code)


MERGE_LOCK = ".bwprof-merge.lock"
"""In RUN/ranks/: the lock the ranks merging in rank 0's place take turns on."""


def _merge_for_rank_0(me: int, size: int, report: RankReport, out: Path, run_id: str,
                      timeout_s: float, options: dict[str, Any],
                      announced: dict[int, str]) -> tuple[int, str] | None:
    """Rank 0 went silent (stopped, hung or died) before its merge: write the merged folder
    from the ranks' own folders (RUN/ranks/rank-NNNN, each as far as it got; this rank's
    `report` as it is), so RUN reads as a run (`bwprof report RUN`) instead of holding only
    ranks/. Rank 0 is `missing`, its finished rows kept; a rank whose folder is final keeps
    the fate it says; one still measuring is `missing`, its finished rows kept. The ranks
    that gave up on rank 0 take turns on a lock in RUN/ranks/: the first merges, the others
    wait for it (an abort while it writes would kill it) and find the folder written.
    Returns (the job's exit code, what was done), or None where nothing was: rank 0's own
    merge had begun (its folder reads as stopped), or RUN/ranks/ cannot be written."""
    if os.path.lexists(out / SYSTEM_FILE) or os.path.lexists(out / RESULTS_FILE):
        return None  # rank 0's merge began: its first system.json says it stopped
    try:
        with waiting_for(out / "ranks" / MERGE_LOCK):
            if os.path.lexists(out / SYSTEM_FILE):  # another rank merged it meanwhile
                merged = read_meta_or_none(out / SYSTEM_FILE)
                code = (EXIT_INTERRUPTED if merged is not None and merged.interrupted
                        else EXIT_FAILED)
                return code, f"another rank merged the ranks' folders into {out}"
            return _merge_folders(me, size, report, out, run_id, timeout_s, options,
                                  announced)
    except (OSError, BwprofError) as exc:  # a full disk: the ranks' folders stay as they are
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"note: rank {me} could not merge the ranks' folders in rank 0's place ({why})",
              file=sys.stderr, flush=True)
        return None


def _merge_folders(me: int, size: int, report: RankReport, out: Path, run_id: str,
                   timeout_s: float, options: dict[str, Any],
                   announced: dict[int, str]) -> tuple[int, str]:
    """`_merge_for_rank_0`'s merge, its lock held."""
    reports: dict[int, RankReport] = {}
    for rank in range(size):
        found = report if rank == me else read_rank_folder(out, rank)
        if found is None:
            continue
        if rank != me:
            _fate_for_rank_0(found, me, rank_dir(out, rank), timeout_s, announced)
        reports[rank] = found
    stream = MergeStream(out, run_id, {rank: RankName.of(found)
                                       for rank, found in reports.items()}, size, timeout_s)
    try:
        for rank in sorted(reports):
            stream.add(reports[rank])
        stream.finalise(report.meta)  # the merge is whole: final, whatever rank 0 got to
    except BaseException:
        stream.abandon()
        raise
    stream.close()
    merged = stream.result(options)
    signalled = interrupts.received()
    if signalled and not merged.interrupted:  # held while it merged
        _stopped_once_merged(merged, signalled)
    kept = len(reports[0].rows) if 0 in reports else 0
    fate = next((r.status for r in (merged.meta.mpi.ranks if merged.meta.mpi else ())
                 if r.rank == 0), "missing")
    return job_code(merged), (f"rank {me} merged the ranks' folders into {out} in its place "
                              f"(rank 0 `{fate}`, its {kept} finished row(s) kept)")


def _fate_for_rank_0(found: RankReport, merger: int, folder: Path, timeout_s: float,
                     announced: dict[int, str]) -> None:
    """The fate of a rank merged from its folder in rank 0's place (`fate_from_folder`,
    where it told the merging rank a signal came `interrupted`): rank 0, silent, and a rank
    whose folder is not final (measuring still, hung or died) `missing`, their finished rows
    kept."""
    found.notes.append(f"rank 0 went silent before its merge: rank {merger} read its "
                       f"{len(found.rows)} row(s) from its folder, {folder}")
    if not fate_from_folder(found, announced.get, lost=found.rank == 0):
        return
    if found.rank == 0:
        found.missing_note = (f"rank 0 went silent for {timeout_s:g} s before its merge "
                              f"(stopped, hung or died): rank {merger} merged the ranks' "
                              f"folders in its place; its {len(found.rows)} finished row(s), "
                              f"read from its folder, are kept")
    else:
        found.missing_note = (f"rank {found.rank}'s folder was not final when rank {merger} "
                              f"merged in rank 0's place (measuring still, hung or died); "
                              f"its {len(found.rows)} finished row(s) are kept")


def fate_from_folder(report: RankReport, said: Callable[[int], str | None] = lambda rank: None,
                     lost: bool = False) -> bool:
    """The fate of a rank read from its own folder, one rule for the three who read one (rank
    0 for a rank that sent nothing in time, a rank merging in a silent rank 0's place,
    `bwprof.fleet.salvage` after the job): `failed` (report.error) or `interrupted` by what
    its system.json says stopped it; else by the stop signal it told the reader of (`said`:
    still finishing, its folder not final); else `missing`, its finished rows kept, where the
    reader takes it as `lost` or its folder is not final (killed, hung, measuring still):
    True, the caller words its `missing_note`; else (False) as its rows say."""
    assert report.meta is not None
    meta = report.meta
    stopped = (meta.stopped_by or "interrupted") if meta.interrupted else said(report.rank)
    if stopped is not None and stopped.startswith(("error", "output error")):
        report.error = stopped
    elif stopped is not None:
        report.interrupted = stopped
    elif lost or meta.state != "finished":
        report.missing = True
        return True
    return False


def _read_own(folder: Path, report: RankReport) -> None:
    """A rank's tables and timelines, as it wrote them in its own folder, into `report`."""
    report.rows = _records(folder / RESULTS_FILE, report.notes)
    report.timings = _records(folder / TIMINGS_FILE, report.notes)
    report.samples = _records(folder / SAMPLES_FILE, report.notes)
    report.findings = _records(folder / FINDINGS_FILE, report.notes)
    try:
        report.timelines = read_timelines(folder)
    except BwprofError:  # a damaged file: the rank's rows and timings still go in
        report.timelines = []


def _salvage(out: Path, rank: int,
             announced: Callable[[], dict[int, str]]) -> RankReport | None:
    """On rank 0: the report of a rank that sent nothing in time, read from its own folder
    where rank 0 can (a folder the nodes share, or a rank of rank 0's node); None where it
    cannot. Every rank writes its rows as it goes, so each it finished is kept: a rank still
    finishing 0.2 s after a stop signal lost them all from the merge, named `missing`. Its
    fate is what its folder says: `interrupted` by the signal its system.json names,
    `failed` by what else stopped it; else `interrupted` where it told rank 0 a signal came
    (`announced`: still finishing, its folder not final); otherwise (measuring still, hung,
    killed, or silent after it finished) `missing`, its finished rows kept."""
    report = read_rank_folder(out, rank)
    if report is None:
        return None
    report.notes.append(f"sent rank 0 nothing in time: its {len(report.rows)} finished "
                        f"row(s) were read from its folder, {rank_dir(out, rank)}")
    fate_from_folder(report, lambda lost: announced().get(lost), lost=True)
    return report


def read_rank_folder(out: Path, rank: int) -> RankReport | None:
    """The report of `rank` as its own folder holds it (RUN/ranks/rank-NNNN: on a folder the
    nodes share, or a rank of this one's node); None where there is none here, or not even
    the system.json of its claim. Its timings only of the rows read (the rank may be
    writing still)."""
    folder = rank_dir(out, rank)
    meta = read_meta_or_none(folder / SYSTEM_FILE)
    if meta is None:
        return None
    report = RankReport(rank, meta.hostname, None, None, list(meta.gpus.used or ()), None,
                        meta=meta)
    _read_own(folder, report)
    kept = []
    for timing in report.timings:
        with suppress(KeyError, TypeError, ValueError):
            if 0 <= integer(timing["result_row"]) < len(report.rows):
                kept.append(timing)
    report.timings = kept
    return report


def _test_delay(rank: int, stage: str) -> None:
    """A test's hook (`BWPROF_FLEET_TEST_DELAY=RANK:SECONDS[:STAGE]`): that rank waits as
    long at `stage`, as a rank slow to finish (loaded, on a slow disk) does: 'finish'
    (the default), before its last steps, its folder written; 'job', when a stop signal
    ends `--hang-rank`'s stuck job, its folder not yet final (a driver call returning
    late)."""
    asked = os.environ.get("BWPROF_FLEET_TEST_DELAY", "").split(":")
    with suppress(ValueError), interrupts.deferred():  # as a step no signal cuts short
        if (len(asked) in (2, 3) and int(asked[0]) == rank
                and (asked[2:] or ["finish"])[0] == stage):
            print(f"test hook: rank {rank} waits {asked[1]} s ({stage})", file=sys.stderr,
                  flush=True)  # the test's cue: what came before it is done
            time.sleep(min(float(asked[1]), 600.0))


def job_code(merged: api.RunResult) -> int:
    """The fleet job's exit code, which every rank exits with: 130 where a rank was
    interrupted (or rank 0 was, while it gathered), else 1 where a rank failed or was lost
    (their `error` rows) or a figure failed, else 0 (docs/fleet.md)."""
    if merged.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if merged.failed else EXIT_OK


def _rank_gpu(gpus: list[int], options: dict[str, Any]) -> Any:
    """This rank's GPU backend and device for GPU-buffer messages (None without a GPU)."""
    if not gpus or options.get("simulate"):
        return None
    from bwprof.gpu.runtime import CudaBackend

    try:
        return CudaBackend(), gpus[0]
    except RuntimeError:
        return None


def read_meta_or_none(path: Path) -> RunMeta | None:
    """A system.json as far as it got (a rank's own, read by whoever merges it; a merged
    folder's), None where there is none or it is damaged: a failed rank's error row says
    what failed, and a merge reads the rank as missing."""
    try:
        return read_system(path)
    except BwprofError:
        return None
