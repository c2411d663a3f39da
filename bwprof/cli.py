"""The `bwprof` command line: thin typer commands over `bwprof.api`.

Exit codes (bwprof.errors; the table in docs/command-line.md): 0 success; 1 a figure failed
validation or raised, or `compare --fail-below` found a regression; 2 bad input (`error: <one
line>` on stderr, nothing measured or written); 3 output that could not be written (disk full, I/O
error); 130 a stop signal (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) at any moment, after one line
saying what was kept (`monitor` runs until Ctrl-C: that is its normal end, 0). A closed,
broken or full stdout changes none of them: the process entry (`bwprof.entry`) guards the
standard streams before this module is imported.

Every path the user gives goes through `bwprof.paths.user_path` (`_user_path`), every float
option through `_finite`, every rich Console through `bwprof.render.consoles`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from bwprof._version import __version__
from bwprof.entry import interrupted_message, say
from bwprof.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    BwprofError,
    OutputError,
    RunInterrupted,
)
from bwprof.render.consoles import PIPED_COLUMNS, console, tame_terminal_sizes
from bwprof.stdio import abandon_stdout

if TYPE_CHECKING:
    from rich.console import Console

    from bwprof.api import RunResult
    from bwprof.render.progress import LineProgress, RichProgress
    from bwprof.schema.meta import GpuMeta, HostInfo

_interrupt_said = False  # set where an interrupt was already explained, so main stays quiet


def _exit_interrupted(detail: str, notes: Sequence[str] = ()) -> NoReturn:
    """Say the command was interrupted (naming the signal where it was not Ctrl-C), with
    `detail` and any `notes`, and exit 130."""
    global _interrupt_said
    _interrupt_said = True
    typer.echo(interrupted_message(detail), err=True)
    for note in notes:
        typer.echo(note, err=True)
    raise typer.Exit(EXIT_INTERRUPTED)


def _stdout_console(plain: bool = False) -> Console:
    """A console for tables on stdout: the terminal's width; where stdout is a file or pipe
    (or `plain`, a fleet rank's pseudo-terminal), no colour codes and PIPED_COLUMNS wide,
    unless COLUMNS says otherwise (within bwprof.render.consoles' sane range)."""
    return console(plain=plain, piped_columns=PIPED_COLUMNS)


def _refused(exc: BwprofError) -> int:
    """The one error boundary's answer to a BwprofError: its line on stderr, its exit code
    (2 bad input, 3 output that could not be written)."""
    typer.echo(f"error: {exc}", err=True)
    return exc.exit_code


def _guarded(command: Callable[..., None]) -> Callable[..., None]:
    """`command` behind the error boundary: what it refuses becomes `_refused`'s line and
    exit code, however the app is invoked (the console script, `main`, typer's test
    runner). No command catches a BwprofError itself."""

    @functools.wraps(command)
    def run_guarded(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except BwprofError as exc:
            raise typer.Exit(_refused(exc)) from None

    return run_guarded


def _bare_flags(params: Sequence[Any]) -> None:
    """A flag takes no value, so its help shows no type: typer's rich help prints every
    option's type after its name, `<bool>` after each flag and after --help (typer 0.29:
    its plain help asks `is_flag` first, its rich help does not; no option declaration
    changes that). A flag with no metavar of its own gets an empty one, which is all the
    rich help then prints."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class _Command(TyperCommand):
    """A command whose help shows no type after a flag (`_bare_flags`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _bare_flags(self.get_params(ctx))
        super().format_help(ctx, formatter)


class _Group(TyperGroup):
    """The app's (and `history`'s) own help, flags without a type too."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _bare_flags(self.get_params(ctx))
        super().format_help(ctx, formatter)


class _App(typer.Typer):
    """A typer app whose every command is registered behind the error boundary, and whose
    help shows no `<bool>` after a flag."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=_Group, **kwargs)

    # typer's own signature, passed through whole: only the registered function changes.
    def command(self, *args: Any, **kwargs: Any) -> Callable[  # type: ignore[override]
            [Callable[..., None]], Callable[..., None]]:
        register = super().command(*args, **{"cls": _Command, **kwargs})
        return lambda command: register(_guarded(command))


app = _App(
    name="bwprof",
    help="Memory-bandwidth and compute/transfer-overlap profiler for GPU servers.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _user_path(raw: str, option: str) -> Path:
    """Every path option and argument the CLI itself uses, checked and made absolute in one
    place (`bwprof.paths.user_path`; the API calls it for the paths it is given): a leading
    `~` is the home folder for every file written (the shell leaves `--out=~/x` alone), a
    name the file system cannot hold is one line. typer's own Path conversion is not used:
    it turns `./~/x` into `~/x` before bwprof sees it."""
    from bwprof.paths import user_path

    return user_path(raw, option)


def _finite(value: float | None) -> float | None:
    """typer callback of every float option: NaN and infinity refused (an infinite
    --mpi-timeout turns a bounded wait into a hang; NaN cannot go into system.json)."""
    from bwprof.coerce import finite_number

    if value is None:
        return None
    try:
        return finite_number(value, "the value")
    except BwprofError as exc:
        raise typer.BadParameter(str(exc).removeprefix("the value ")) from None


def _numba_ready(fleet: bool = False) -> None:
    """For the commands that load numba: a NUMBA_* variable numba cannot use is one line
    and exit 2, before numba's own import fails with a traceback (in a fleet run, said by
    rank 0 only, as every refusal)."""
    from bwprof.numbaenv import import_numba

    try:
        import_numba()
    except BwprofError:
        if fleet:
            from bwprof.fleet.comm import rank_from_environment

            if rank_from_environment() not in (None, 0):
                raise typer.Exit(EXIT_USAGE) from None
        raise


MAX_MPI_TIMEOUT_S = 7 * 24 * 3600
"""--mpi-timeout's bound: a finite wait of 1e308 s is the hang the timeout is there to end;
no fleet step waits for its ranks anywhere near a week."""


@app.command("run")
def run_command(
    preset: Annotated[
        str, typer.Option(help="quick (5 repeats) | standard (10) | full (20); also the "
                                  "transfer sizes swept.")
    ] = "standard",
    cases: Annotated[
        str | None,
        typer.Option(help="Comma-separated case keys or prefixes, e.g. 'ddr_' or 'ddr_triad' "
                          "(bwprof list shows every key)."),
    ] = None,
    repeats: Annotated[
        int | None, typer.Option(help="Timed samples per figure, >= 2 (host: the first is "
                                        "dropped; GPU: after a warm-up sample).")
    ] = None,
    threads: Annotated[
        str | None, typer.Option(help="Host thread counts, e.g. '1,2' to sweep (default: all); "
                                      "never more than NUMBA_NUM_THREADS.")
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(help="Bytes per host array, e.g. 512MiB or 256M,1G (default: 4x LLC); "
                          "the host latency cases chase working sets of these sizes instead "
                          "of their sweep (default: 4 KiB to 4x the LLC)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan (jobs, sizes, estimated time, "
                                             "peak host and GPU memory) and measure nothing.")
    ] = False,
    budget: Annotated[
        float | None,
        typer.Option(help="Seconds the run should take: the sweeps are scaled down until "
                          "the planner's estimate fits, and what was dropped is said.",
                     callback=_finite, metavar="SECONDS"),
    ] = None,
    machine: Annotated[
        str | None,
        typer.Option(help="With --dry-run: plan for the machine a file describes (an earlier "
                          "run's system.json, or a shape file) instead of this one.",
                     metavar="FILE"),
    ] = None,
    out: Annotated[
        str | None,
        typer.Option(help="Run folder to create (default: reports/<host>-<UTC time>)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar or table: only the "
                                                        "verdict line and where it wrote.")
                     ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the run's result as JSON on stdout for "
                                          "scripts (progress and notes stay on stderr).")
    ] = False,
    no_plots: Annotated[
        bool, typer.Option("--no-plots", help="Do not draw the PNG plots nor write "
                                              "report.html.")
    ] = False,
    no_telemetry: Annotated[
        bool, typer.Option("--no-telemetry", help="Do not sample the GPUs' counters (NVML).")
    ] = False,
    sample_interval: Annotated[
        float, typer.Option("--sample-interval", help="Counter sampling interval, ms.",
                            callback=_finite)
    ] = 50.0,
    file_format: Annotated[
        str, typer.Option("--format", help="csv | parquet (Parquet copies beside the CSV).")
    ] = "csv",
    mpi: Annotated[
        bool, typer.Option("--mpi", help="Fleet run: one rank per node or GPU under mpirun "
                                         "or srun, merged on rank 0 (default: on when "
                                         "launched by them).")
    ] = False,
    mpi_timeout: Annotated[
        float, typer.Option("--mpi-timeout", callback=_finite,
                            help="Seconds a rank waits for the others at a collective step "
                                 "(at most 604800, 7 days: a longer wait is a hang).")
    ] = 1800.0,
    all_pairs: Annotated[
        bool, typer.Option("--all-pairs", help="Fleet run: net_p2p measures every ordered pair "
                                               "of ranks, N(N-1) (default: a ring both ways "
                                               "plus 2 sampled pairs per rank, O(N)).")
    ] = False,
    groups: Annotated[
        str | None,
        typer.Option("--groups", metavar="FILE",
                     help="Fleet run: a file of 'host group' lines (the switch or rack of "
                          "each node) so net_p2p's sampled pairs cross groups and stay "
                          "within them (docs/fleet.md)."),
    ] = None,
    fail_rank: Annotated[
        int | None, typer.Option("--fail-rank", hidden=True,
                                 help="Make this rank fail (tests of fleet error handling).")
    ] = None,
    hang_rank: Annotated[
        int | None, typer.Option("--hang-rank", hidden=True,
                                 help="Make this rank hang (tests of fleet timeouts).")
    ] = None,
    simulate: Annotated[
        bool, typer.Option("--simulate", hidden=True,
                           help="Run GPU cases on the simulated CPU backend (tests only).")
    ] = False,
) -> None:
    """Measure this machine and write a run folder (results.csv, timings.csv, system.json,
    summary.csv, plots)."""
    from bwprof.fleet.comm import launched_by_mpi

    fleet = mpi or launched_by_mpi()
    if (all_pairs or groups is not None) and not fleet:
        raise BwprofError("--all-pairs and --groups choose net_p2p's rank pairs: they need a "
                          "fleet run (mpirun or srun with several ranks, or --mpi)")
    if machine is not None and not dry_run:
        raise BwprofError("--machine plans for a machine described in a file: it needs "
                          "--dry-run (nothing can be measured on a described machine)")
    if as_json and dry_run:
        raise BwprofError("--json prints a measured run's result: --dry-run measures "
                          "nothing (its plan is text); drop --json to see the plan")
    if dry_run:
        _dry_run(dict(cases=cases, preset=preset, repeats=repeats, threads=threads,
                      size=size, budget_s=budget, simulate=simulate,
                      telemetry=not no_telemetry, plots=not no_plots), machine)
        return
    if mpi_timeout <= 0:
        raise BwprofError(f"--mpi-timeout must be positive, got {mpi_timeout:g}")
    if mpi_timeout > MAX_MPI_TIMEOUT_S:
        raise BwprofError(f"--mpi-timeout must be at most {MAX_MPI_TIMEOUT_S} seconds (7 days), "
                          f"got {mpi_timeout:g}: a rank that waits longer for the others is "
                          "a hang")
    _numba_ready(fleet)
    if threads is None:
        _say_thread_cap()
    from bwprof import api  # after the checks above: pandas alone takes 0.3 s to load

    prefix = "simulated-" if simulate else ""
    out_dir = (_user_path(out, "--out") if out is not None
               else None if fleet else _user_path(
                   str(api.default_run_dir(prefix + api.hostname(), api.utc_now())),
                   "the default --out"))
    options = dict(
        cases=cases, preset=preset, repeats=repeats, threads=threads, size=size,
        command_line=["bwprof", *sys.argv[1:]], simulate=simulate, plots=not no_plots,
        telemetry=not no_telemetry, sample_interval_ms=sample_interval,
        file_format=file_format, unique_out=out is None, budget_s=budget,
    )
    on_plan = None if fleet or quiet else _say_plan
    fleet_options = (dict(timeout_s=mpi_timeout, fail_rank=fail_rank, hang_rank=hang_rank,
                          all_pairs=all_pairs, groups=groups) if fleet else None)
    result = _measure(out_dir, {**options, "on_plan": on_plan} if on_plan else options,
                      fleet_options, quiet)
    if result is not None:  # None: a fleet rank other than 0, for which rank 0 reports
        _report_run(result, quiet, fleet, as_json, out)


def _say_plan(lines: list[str]) -> None:
    for line in lines:
        typer.echo(line, err=True)


def _dry_run(options: dict[str, Any], machine: str | None) -> None:
    """`run --dry-run`: the plan and its cost on stdout; nothing measured or written."""
    from bwprof import api
    from bwprof.render.planview import plan_lines

    _numba_ready()
    planned = api.plan_run(machine=None if machine is None
                           else _user_path(machine, "--machine"), **options)
    plan, estimate = planned.plan, planned.estimate
    gpus = planned.gpus.model_counts()
    title = (f"{planned.described + ': ' if planned.described else ''}"
             f"{planned.host.hostname} ({planned.host.cpu_model}, {planned.host.usable_cpus} "
             f"CPUs) · " + (", ".join(f"{n}× {m}" for m, n in gpus.items()) or "no GPU"))
    settings = (f"preset {plan.preset}, {plan.repeats} repeats, threads "
                f"{','.join(map(str, plan.threads))}" + (", simulated GPUs" if
                                                         options.get("simulate") else ""))
    for line in plan_lines(title, settings, planned.table(), seconds=estimate.seconds,
                           once_s=estimate.once.seconds,
                           peak_host_bytes=estimate.peak_host_bytes,
                           peak_device_bytes=estimate.peak_device_bytes,
                           memory_total_bytes=planned.host.memory_total_bytes,
                           dropped=plan.dropped, budget_s=plan.budget_s, notes=planned.notes):
        typer.echo(line)


def _progress(fleet: bool, quiet: bool) -> RichProgress | LineProgress | None:
    """A live bar on a terminal; one line per job where stderr is a file or pipe, and under
    mpirun, whose ranks write to a pseudo-terminal even when mpirun's own output is a log (a
    fleet run prints plain text: no colour codes)."""
    from bwprof.render.progress import LineProgress, RichProgress

    if quiet:
        return None
    bar = console(stderr=True, plain=fleet)
    return RichProgress(bar) if bar.is_terminal else LineProgress(sys.stderr)


def _say_thread_cap() -> None:
    """Where NUMBA_NUM_THREADS, not the CPUs, sets the default thread count, say so: the
    DDR figure is then of fewer cores than the process may use."""
    from bwprof.numbaenv import thread_limit
    from bwprof.plan import thread_cap_note
    from bwprof.system import usable_cpus

    note = thread_cap_note(usable_cpus(), thread_limit())
    if note is not None:
        typer.echo(f"note: {note}", err=True)


def _measure(out_dir: Path | None, options: dict[str, Any],
             fleet_options: dict[str, Any] | None, quiet: bool) -> RunResult | None:
    """Run the measurement (one box, or this rank's share of a fleet run), turning what
    stops it into one line and its exit code: bad input 2, an interrupt 130 after saying
    what was kept. SIGTERM, SIGHUP and SIGQUIT stop it as Ctrl-C does (bwprof.entry
    installed the handlers before anything else)."""
    from bwprof import api

    progress = _progress(fleet_options is not None, quiet)
    try:
        if fleet_options is None:
            return api.run(out=out_dir, progress=progress, **options)
        return _measure_fleet_rank(out_dir, options, fleet_options, progress)
    except RunInterrupted as exc:
        if exc.result.run_dir is None and out_dir is not None:  # given back before a row
            _exit_interrupted(" before the first measurement: nothing was written",
                              exc.result.notes)
        _exit_interrupted(f": kept {len(exc.result.rows)} finished row(s) in "
                          f"{exc.result.run_dir}", exc.result.notes)
    except KeyboardInterrupt:  # outside the measuring loop: before it, or while finishing
        if out_dir is not None and (Path(out_dir) / "results.csv").is_file():
            _exit_interrupted(f" before the run finished: what it wrote is in {out_dir}")
        _exit_interrupted(" before the first measurement: nothing was written")
    finally:
        if progress is not None:
            progress.stop()


def _measure_fleet_rank(out_dir: Path | None, options: dict[str, Any],
                        fleet_options: dict[str, Any],
                        progress: RichProgress | LineProgress | None) -> RunResult | None:
    """This rank's part of a fleet run; the merged result on rank 0, None elsewhere. Only
    rank 0 says why a run was refused: the other ranks exit 2 quietly."""
    from bwprof.fleet.comm import rank_from_environment
    from bwprof.fleet.run import QuietExit, run_fleet

    try:
        return run_fleet(out=out_dir, progress=progress, **fleet_options, **options)
    except QuietExit:
        raise typer.Exit(EXIT_USAGE) from None
    except BwprofError:
        if rank_from_environment() not in (None, 0):
            raise typer.Exit(EXIT_USAGE) from None  # rank 0 says it once
        raise


def _report_run(result: RunResult, quiet: bool, fleet: bool, as_json: bool = False,
                out: str | None = None) -> None:
    """The summary and findings (unless quiet), the box's overall verdict and the next step
    (the verdict alone when quiet), where the run went; or with `as_json` the run's result
    as JSON on stdout and where it went on stderr. Exit 1 when a figure failed validation
    or raised; the verdict, a FAIL too, never changes the exit code (`bwprof accept` is the
    gate)."""
    from bwprof.render.terminal import page_written, print_answer, print_report

    run_dir = out if out is not None else None if result.run_dir is None else str(
        result.run_dir)
    if as_json:
        from bwprof import saved
        from bwprof.render.jsontext import echo_json
        from bwprof.render.outputs import Written

        document = saved.run_report_json(saved.RunReport(result, Written(list(result.files))),
                                         warn=False, run_dir=run_dir)
        for note in result.notes:
            typer.echo(note, err=True)
        echo_json(document)
        typer.echo(f"wrote {result.run_dir}", err=True)
    else:
        stdout = _stdout_console(plain=fleet)
        if not quiet:
            print_report(stdout, result, result.machine)
        for note in result.notes:
            typer.echo(note, err=True)
        print_answer(stdout, result, run_dir, next_step=not quiet,
                     page=page_written(result.files))
        typer.echo(f"wrote {result.run_dir}")
    if result.failed:
        typer.echo(
            f"error: {len(result.failed)} figure(s) failed validation or raised; "
            f"see the status and note columns of results.csv in {result.run_dir}",
            err=True,
        )
        raise typer.Exit(EXIT_FAILED)


@app.command("report")
def report_command(
    run_dir: Annotated[str, typer.Argument(help="A run folder written by bwprof run.")],
    model: Annotated[
        str | None,
        typer.Option(help="PARAMETERS:DTYPE, e.g. 70e9:bf16 or 70B:bf16 (suffixes K, M, B, "
                          "T; fp32, fp16, bf16, fp8, int8, int4): what the figures mean for "
                          "that model's weights."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
    no_plots: Annotated[
        bool, typer.Option("--no-plots", help="Do not draw the PNG plots.")
    ] = False,
    file_format: Annotated[
        str, typer.Option("--format", help="csv | parquet (Parquet copies beside the CSV).")
    ] = "csv",
    out: Annotated[
        str | None,
        typer.Option(help="Folder for summary.csv, plots and report.html (default: "
                          "RUN_DIR/report; with --json alone nothing is written)."),
    ] = None,
    html: Annotated[
        bool, typer.Option("--html", help="Also write report.html: one self-contained page "
                                          "(figures, plots, tables) to attach to a ticket.")
    ] = False,
    rows: Annotated[
        bool, typer.Option("--rows", help="Also show every measured row (largest GPU sizes).")
    ] = False,
    all_gpus: Annotated[
        bool, typer.Option("--all-gpus", help="A fleet run of more than 16 GPUs: show a row "
                                              "per GPU and path (and every per-GPU line), "
                                              "not the fleet digest.")
    ] = False,
) -> None:
    """Summary, findings and plots of a saved run folder, on any machine (no hardware used).

    A fleet (more than 16 GPUs) shows a digest: per path how many GPUs, median,
    lowest and highest (naming the GPU), how many are below their band, and the
    worst GPUs. summary.csv and --json keep every GPU; --all-gpus shows them.
    """
    from bwprof import saved

    report = saved.make_run_report(run_dir, model=model, plots=not no_plots,
                                   file_format=file_format, out=out, html=html,
                                   write=not as_json)
    if as_json:
        from bwprof.render.jsontext import echo_json

        echo_json(saved.run_report_json(report, show_rows=rows, run_dir=run_dir))
    else:
        saved.print_run_report(_stdout_console(), report, show_rows=rows, run_dir=run_dir,
                               all_gpus=all_gpus)


@app.command("compare")
def compare_command(
    run_dirs: Annotated[
        list[str], typer.Argument(help="Two or more run folders; the first is the baseline.")
    ],
    out: Annotated[
        str | None, typer.Option(help="Folder to write compare.csv into.")
    ] = None,
    fail_below: Annotated[
        str | None,
        typer.Option(help="Exit 1 when a headline figure fell more than PCT% below the "
                          "baseline's (or is missing), e.g. 10.", metavar="PCT"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
    file_format: Annotated[
        str, typer.Option("--format", help="csv | parquet (with --out).")
    ] = "csv",
    show_all: Annotated[
        bool, typer.Option("--all", help="Also show every measured row, not only headlines.")
    ] = False,
    all_gpus: Annotated[
        bool, typer.Option("--all-gpus", help="Runs of more than 16 GPUs: show a row per GPU "
                                              "and figure, not the fleet digest.")
    ] = False,
    by: Annotated[
        str, typer.Option("--by", help="node: every device (fleet runs: node:gpuN); model: "
                                       "the median per device model.")
    ] = "node",
) -> None:
    """The same figures across runs and boxes: change in %, beyond noise or not, machine
    differences, and a fleet-acceptance exit code with --fail-below.

    Runs of more than 16 GPUs show a digest: per figure how many GPUs compared, the median
    change, how many changed beyond noise for the worse and the better, and the worst GPUs.
    compare.csv (--out) and --json keep every row; --all-gpus shows them.
    """
    from bwprof import saved
    from bwprof.analysis.compare import comparison_json, regression_lines
    from bwprof.render.comparison import print_comparison
    from bwprof.render.terminal import print_warnings

    result = saved.compare(run_dirs, by=by, out=out, fail_below=fail_below,
                           file_format=file_format)
    comparison, regressions = result.comparison, result.regressions
    if as_json:
        document = comparison_json(comparison, result.threshold, regressions)
        print_warnings(comparison.state_warnings)  # runs that did not finish, on stderr
        from bwprof.render.jsontext import echo_json

        echo_json(document)
    else:
        print_comparison(_stdout_console(), comparison, show_all, all_gpus=all_gpus)
        if result.written:
            typer.echo(f"wrote {', '.join(str(path) for path in result.written)}")
    for line in regression_lines(regressions, result.threshold or 0):
        typer.echo(line, err=True)
    if regressions:
        raise typer.Exit(EXIT_FAILED)


# -- verdicts: `bwprof accept` (issue 20) --------------------------------------------------
# Kept in one block of its own: `history` and `trend` (the same issue) live in another.


@app.command("accept")
def accept_command(
    run_dirs: Annotated[
        list[str], typer.Argument(help="Run folders (or fleet runs) to hold against their bands.")
    ],
    spec: Annotated[
        str | None,
        typer.Option(help="A TOML spec file that overrides bands and thresholds per GPU model "
                          "(docs/verdicts.md shows the format)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for pipelines.")] = False,
    out: Annotated[
        str | None,
        typer.Option(help="Folder to write accept.csv and accept_fleet.csv into."),
    ] = None,
    file_format: Annotated[
        str, typer.Option("--format", help="csv | parquet (Parquet copies beside the CSV, "
                                           "with --out).")
    ] = "csv",
    all_gpus: Annotated[
        bool, typer.Option("--all-gpus", help="More than 16 GPUs: show every check (one "
                                              "box's table, or the fleet table and each "
                                              "box's verdict line), not the fleet digest.")
    ] = False,
) -> None:
    """PASS, WARN or FAIL per GPU and path against the part's achievable band (ERROR where
    bwprof's own error left a path unjudged): exit 0 when nothing fails (ERROR included: it
    is not the box's), 1 when anything does, 2 for bad input.

    More than 16 GPUs show a digest: the verdict, per path and case how many GPUs
    have each verdict, and the worst GPUs. --json keeps every check; --all-gpus
    shows them.
    """
    from bwprof import saved
    from bwprof.render.accept import accept_json, text_lines

    result, written = saved.accept(run_dirs, spec=spec, out=out, file_format=file_format)
    if as_json:
        from bwprof.render.jsontext import echo_json

        echo_json(accept_json(result))
    else:
        lines = text_lines(result, all_gpus=all_gpus, written=written)
        if lines:  # one write: a fleet's every check is a hundred thousand lines
            typer.echo("\n".join(lines))
        for note in result.notes:
            typer.echo(f"note: {note}", err=True)
        if written:
            typer.echo(f"wrote {', '.join(str(path) for path in written)}")
    if result.exit_code:
        raise typer.Exit(result.exit_code)


# -- end of the verdicts block ------------------------------------------------------------


@app.command("list")
def list_command() -> None:
    """Every case key with a one-line description and whether it can run here (in an MPI
    launch: what `bwprof run` would do there, said once, by rank 0)."""
    from bwprof.fleet.comm import launch_size, local_from_environment, rank_from_environment

    ranks = launch_size()
    if ranks is not None and (rank_from_environment() or 0) != 0:
        return  # one table for the launch, not one per rank
    if any(name.startswith("NUMBA_") for name in os.environ):
        _numba_ready()  # a NUMBA_* variable numba cannot use is one line here too
    from bwprof.availability import case_availability  # not bwprof.api: pandas, numba
    from bwprof.cases import CASES

    local = local_from_environment() if ranks is not None else None
    availability = case_availability(CASES, ranks=ranks, local=local)
    reasons = list(dict.fromkeys(why for why in availability.values() if why is not None))
    width = max(len(case.key) for case in CASES)
    typer.echo(f"{'key':<{width}}  target  figure      here  description")
    for case in CASES:
        why = availability[case.key]
        here = "yes" if why is None else f"no{reasons.index(why) + 1}"
        # Bandwidth cases say how they count bytes; the others what they measure instead.
        figure = case.byte_convention if case.metric == "bandwidth" else case.metric
        typer.echo(
            f"{case.key:<{width}}  {case.target:<6}  {figure:<10}  {here:<4}  "
            f"{case.description}"
        )
    for number, why in enumerate(reasons, start=1):
        typer.echo(f"no{number}: {why}")
    if ranks is not None:
        node = (f"; rank 0 shares its node with {local[1] - 1} other rank(s) and holds one "
                "GPU of it" if local is not None and local[1] > 1 else "")
        typer.echo(f"here: rank 0 of an MPI launch of {ranks} ranks, as `bwprof run` in it "
                   f"would measure{node}")


@app.command("info")
def info_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the metadata as JSON.")] = False,
) -> None:
    """The host (CPU, caches, memory, NUMA, OS, versions) and the GPUs where a driver is present."""
    from bwprof._version import git_commit
    from bwprof.api import machine_info
    from bwprof.schema.meta import version_text
    from bwprof.units import format_bytes

    _numba_ready()
    host, gpus = machine_info()
    commit = git_commit()
    if as_json:
        typer.echo(json.dumps({"bwprof_version": __version__, "bwprof_commit": commit,
                               "host": host.as_dict(), "gpus": gpus.as_dict()}, indent=2,
                              allow_nan=False))
        return
    caches = ", ".join(
        f"L{c.level} {format_bytes(c.size_bytes)} x{c.instances}" for c in host.caches
    )
    numa = "; ".join(f"node{n.node}: cpus {n.cpus}" for n in host.numa_nodes) or "unknown"
    lines = [
        f"host        {host.hostname}",
        f"cpu         {host.cpu_model}",
        f"cores       {host.physical_cores or '?'} physical, {host.logical_cpus} logical, "
        f"{host.usable_cpus} usable, {host.sockets or '?'} socket(s)" + _numba_threads_text(),
        f"caches      {caches or 'unknown'}"
        + (" (from CPUID, one instance a level: /sys lists none)"
           if host.cache_source == "cpuid" else ""),
        f"memory      {format_bytes(host.memory_total_bytes) if host.memory_total_bytes else '?'}"
        f" total, {format_bytes(host.memory_available_bytes or 0)} available",
        f"numa        {numa}",
        f"huge pages  {_hugepage_text(host.transparent_hugepages, host.numpy_asks_hugepages)}",
        f"placement   {_placement_text(host)}",
        f"ddr peak    {host.ddr_peak_gbps:.1f} GB/s ({host.ddr_peak_note})"
        if host.ddr_peak_gbps else f"ddr peak    unknown: {host.ddr_peak_note}",
        f"os          {host.os}" + (f" ({host.sandbox} sandbox)" if host.sandbox else ""),
        f"python      {host.python}",
        "packages    " + ", ".join(f"{k} {v}" for k, v in host.packages.items() if v),
        f"bwprof      {version_text(__version__, commit)}",
        f"gpus        {gpus.count}" if gpus.count else f"gpus        none: {gpus.reason}",
    ]
    for device in gpus.devices:
        lines.append(_gpu_line(device))
        details = _nvml_line(device.metadata)
        if details:
            lines.append(details)
    typer.echo("\n".join(lines))


def _numba_threads_text() -> str:
    """Where NUMBA_NUM_THREADS is set, the thread limit it puts on the host cases."""
    from bwprof.numbaenv import NUM_THREADS, num_threads_setting, thread_limit

    return (f"; numba runs at most {thread_limit()} thread(s) ({NUM_THREADS})"
            if num_threads_setting() is not None else "")


def _placement_text(host: HostInfo) -> str:
    """The process's NUMA memory policy, memory nodes and CPUs, and whether an inherited
    numactl or a scheduler's cpuset binds it narrower than the machine."""
    from bwprof.cpulist import parse_cpu_list
    from bwprof.host.mempolicy import NUMA_MAPS_MODES, Policy, describe_binding

    policy = None
    if host.memory_policy:
        mode, _, nodes = host.memory_policy.partition(":")
        if mode in NUMA_MAPS_MODES.values():
            policy = Policy(mode, parse_cpu_list(nodes) or frozenset())
    machine = frozenset(n.node for n in host.numa_nodes)
    # Mems_allowed is the kernel's account of the cpuset's nodes; the cgroup's own file where
    # /proc does not say.
    mems = parse_cpu_list(host.mems_allowed) or parse_cpu_list(host.cpuset_mems)
    return describe_binding(policy, host.memory_policy_source, mems, machine,
                            parse_cpu_list(host.cpus_allowed), host.logical_cpus)


def _hugepage_text(mode: str | None, numpy_asks: bool | None) -> str:
    """What page size the host STREAM arrays get, which moves DDR figures by several percent."""
    from bwprof.system import host_arrays_get_huge_pages

    if mode is None:
        return "unknown (no /sys/kernel/mm/transparent_hugepage)"
    return (f"transparent huge pages '{mode}': host arrays get "
            + ("2 MiB pages where the kernel has them free"
               if host_arrays_get_huge_pages(mode, numpy_asks) else "4 KiB pages"))


def _nvml_line(meta: Mapping[str, object]) -> str:
    """What NVML adds about a GPU, on a second line (empty without NVML)."""
    fields = (("uuid", "uuid"), ("driver", "driver_version"), ("CUDA", "cuda_driver_version"),
              ("VBIOS", "vbios_version"), ("ECC", "ecc_mode_current"),
              ("power limit W", "power_limit_w"), ("SM max MHz", "sm_clock_max_mhz"),
              ("mem max MHz", "memory_clock_max_mhz"), ("bus bits", "memory_bus_width_bits"),
              ("NVLink links", "nvlink_links_up"), ("CPUs", "cpu_affinity"))
    shown = [f"{label} {meta[key]}" for label, key in fields if meta.get(key) not in (None, "")]
    return "            " + ", ".join(shown) if shown else ""


def _gpu_line(device: GpuMeta) -> str:
    """One line per GPU for `bwprof info`: identity, memory, link, NUMA and peaks."""
    from bwprof.units import format_bytes

    props, meta = device.properties, device.metadata

    def peak(value: float | None) -> str:
        return f"{value:.0f} GB/s" if value else "?"

    link = (f"PCIe Gen{meta.get('pcie_gen_current', '?')} x{meta.get('pcie_width_current', '?')}"
            f" (max Gen{meta.get('pcie_gen_max', '?')} x{meta.get('pcie_width_max', '?')})")
    major, minor = props.compute_capability
    return (
        f"  {device.label}      {props.name} [{props.pci_bus_id or '?'}], "
        f"{format_bytes(props.total_memory_bytes)}, L2 {format_bytes(props.l2_bytes)}, "
        f"cc {major}.{minor}, {props.async_engines} copy engines, {link}, NUMA node "
        f"{device.numa_node if device.numa_node is not None else '?'}; "
        f"peaks: HBM {peak(device.peak_hbm_gbps)}, PCIe {peak(device.peak_pcie_gbps)}/direction, "
        f"NVLink {peak(device.peak_nvlink_gbps)}"
    )


@app.command("kernels")
def kernels_command(
    cc: Annotated[
        str | None,
        typer.Option(
            "--cc",
            help="Compute capability MAJOR.MINOR, e.g. 9.0 (default: this GPU's, else 9.0).",
        ),
    ] = None,
) -> None:
    """Compile every CUDA kernel to PTX (no GPU needed) and show its global loads and stores."""
    from bwprof import api
    from bwprof.gpu import ptx

    _numba_ready()
    target, results = api.compile_kernels(cc)
    typer.echo("\n".join(ptx.report_lines(results, target)))
    if any(not r.ok for r in results):
        raise typer.Exit(EXIT_FAILED)


@app.command("monitor")
def monitor_command(
    interval: Annotated[float, typer.Option(help="Sampling interval, ms.",
                                            callback=_finite)] = 500.0,
    csv_file: Annotated[
        str | None, typer.Option("--csv", help="Keep every sample in this CSV file.")
    ] = None,
    count: Annotated[
        int | None, typer.Option(help="Stop after this many samples (default: until Ctrl-C).")
    ] = None,
) -> None:
    """Live view of every GPU's counters (clocks, power, PCIe, DRAM and NVLink rates)."""
    from rich.live import Live

    from bwprof import api
    from bwprof.telemetry.monitor import monitor, table

    opened = api.open_monitor(interval, count, csv_file)
    reader, csv_path = opened.reader, opened.csv_path
    peaks = reader.hbm_peaks()
    try:
        with Live(table([], interval, 0), auto_refresh=False, console=console()) as live:
            done = monitor(reader, interval / 1000, csv_path,
                           show=lambda latest, n: live.update(table(latest, interval, n,
                                                                    peaks), refresh=True),
                           count=count)
    except OutputError:
        if csv_path is not None and opened.created_csv:
            _remove_if_empty(csv_path)  # made by this command, and never written
        raise
    where = f"; every sample in {csv_path}" if csv_path is not None else ""
    typer.echo(f"stopped after {done.taken} sample(s){where}")
    if done.error_count:
        typer.echo(f"{done.error_count} read(s) failed; the first: {done.errors[0]}", err=True)
        if not done.taken:
            raise typer.Exit(EXIT_FAILED)


def _remove_if_empty(path: Path) -> None:
    """Unlink `path` where it is an empty regular file (never a device, a link or data)."""
    with contextlib.suppress(OSError):
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_size == 0:
            path.unlink()


# -- history and trend: `bwprof history add`, `compact`, `trend` (bwprof.store.history*) --

history_app = _App(
    name="history", no_args_is_help=True, add_completion=False,
    help="The history store: every run's headline figures, one Parquet file per run.",
)
app.add_typer(history_app, name="history")


@history_app.command("add")
def history_add_command(
    run_dirs: Annotated[list[str], typer.Argument(help="Run folders written by bwprof run.")],
    store: Annotated[str, typer.Option("--store", help="The history store's folder (made "
                                                       "where missing).")],
) -> None:
    """Add each run's headline figures to the store, once per run (a run added again is
    said and left as it is). A folder refused is its own `error:` line and the others are
    added: exit 2 where any was refused. Needs pyarrow."""
    from bwprof import saved
    from bwprof.store.history import Added, Refused, added_lines

    refused = False

    def say(outcome: Added | Refused) -> None:
        # As each folder is done: a store that fails later (exit 3) hides none of these.
        nonlocal refused
        if isinstance(outcome, Refused):
            refused = True
            typer.echo(f"error: {outcome.why}", err=True)
        else:
            typer.echo(added_lines([outcome])[0])

    saved.history_add(run_dirs, store, on_outcome=say)
    if refused:
        raise typer.Exit(EXIT_USAGE)


@history_app.command("compact")
def history_compact_command(
    store: Annotated[str, typer.Option("--store", help="The history store's folder.")],
) -> None:
    """Write the store's index: every run's rows in one file, so that `trend` reads it and
    only the runs added since. The run files stay the store. Needs pyarrow."""
    from bwprof import saved

    done = saved.history_compact(store)
    for note in done.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"compacted {done.covered} run file(s) ({done.read} read now) into "
               f"{done.target}")


@app.command("trend")
def trend_command(
    store: Annotated[str, typer.Option("--store", help="The history store's folder.")],
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="Only this GPU: its UUID, serial, or "
                                               "HOST:DEVICE for a figure without one.")
    ] = None,
    case: Annotated[str | None, typer.Option("--case", help="Only this case key.")] = None,
    out: Annotated[
        str | None, typer.Option(help="Folder for the trend-<case>.png plots (default: "
                                      "reports/trend).")
    ] = None,
    threshold: Annotated[
        float, typer.Option("--threshold", metavar="PCT", callback=_finite,
                            help="Flag a figure whose latest run fell more than PCT% below "
                                 "the median of its earlier runs (a latency: rose above).")
    ] = 5.0,
    no_plots: Annotated[
        bool, typer.Option("--no-plots", help="Do not draw the PNG plots: only say which "
                                              "figures fell.")
    ] = False,
) -> None:
    """Each GPU's figures over time against the fleet's range (PNG per case), and the GPUs
    that fell below their own history: exit 1 when any did."""
    from bwprof import saved

    result = saved.trend(store, gpu=gpu, case=case, out=out, threshold=threshold,
                         plots=not no_plots)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    plots = ("no plots (--no-plots)" if no_plots
             else f"wrote {', '.join(str(path) for path in result.written)}")
    typer.echo(f"{result.gpus} GPU(s) on {result.boxes} host(s), "
               f"{result.rows['case'].nunique()} case(s), {result.rows['run_key'].nunique()} "
               f"run(s); {plots}")
    found = result.falls
    for fall in found:
        typer.echo(fall.line(threshold))
    if found:
        raise typer.Exit(EXIT_FAILED)
    typer.echo(f"no figure fell more than {threshold:g}% below its own history")

# -- end of history and trend ------------------------------------------------------------------


# -- export: `bwprof export --openmetrics` (issue 35; bwprof.render.openmetrics) ---------------


@app.command("export")
def export_command(
    run_dirs: Annotated[
        list[str], typer.Argument(help="Finished run folders written by bwprof run, one per "
                                       "box (a fleet's in one file).")
    ],
    openmetrics: Annotated[
        str | None,
        typer.Option("--openmetrics", metavar="FILE",
                     help="Write the headline figures, their peaks and the verdicts as "
                          "OpenMetrics text to FILE, whole (node_exporter's textfile "
                          "collector: a name ending .prom in its folder); - for stdout."),
    ] = None,
) -> None:
    """The runs' headline figures, peaks and verdicts for Prometheus and Grafana
    (docs/monitoring.md): exit 0 whatever the verdicts, 2 for a simulated or unfinished run."""
    from bwprof import saved
    from bwprof.schema.text import shown

    if openmetrics is None:
        raise BwprofError("give --openmetrics FILE (a name ending .prom in node_exporter's "
                          "--collector.textfile.directory), or --openmetrics - for stdout")
    result = saved.export_openmetrics(run_dirs, None if openmetrics == "-" else openmetrics)
    if result.path is None:
        typer.echo(result.text, nl=False)
        return
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {result.series} series of {len(result.runs)} run(s) to "
               f"{shown(result.path)}")

# -- end of export ------------------------------------------------------------------------------


# -- salvage: `bwprof salvage RUN` (issue 37; bwprof.fleet.salvage) -----------------------------


def _ranks_count(value: str | None) -> int | None:
    """typer callback of salvage's --ranks: digits alone, 1 to 1,000,000 (`ranks_value`)."""
    from bwprof.fleet.salvage import MAX_RANKS, ranks_value

    if value is None:
        return None
    count = ranks_value(value)
    if count is None:
        raise typer.BadParameter(f"{value!r} is not a number of ranks from 1 to {MAX_RANKS:,} "
                                 "(the job's mpirun -np, in digits)")
    return count


@app.command("salvage")
def salvage_command(
    run_dir: Annotated[
        str, typer.Argument(metavar="RUN", help="A fleet job's folder that holds only ranks/ "
                                                "(the job ended before rank 0's merge).")
    ],
    ranks: Annotated[
        str | None,
        typer.Option("--ranks", metavar="N", callback=_ranks_count,
                     help="The job's size (mpirun -np), confirming it where far fewer ranks "
                          "left a folder in RUN (a node-local --out)."),
    ] = None,
) -> None:
    """Merge a fleet job's rank folders into RUN where the job ended before rank 0's merge.

    A rank killed or mpirun stopped leaves RUN holding only ranks/rank-NNNN; this merges them
    as rank 0 would have, each rank's fate what its folder says (docs/fleet.md). Exit 0
    merged, 2 bad input or refused, 3 RUN cannot be written or memory ran out, 130
    interrupted (the next try merges RUN whole).
    """
    from bwprof.fleet.salvage import interrupted_detail, merged_line

    run = _user_path(run_dir, "RUN")
    try:
        said = merged_line(run, None if ranks is None else int(ranks))  # the callback's int
    except KeyboardInterrupt:
        _exit_interrupted(interrupted_detail(run))
    typer.echo(said)

# -- end of salvage -----------------------------------------------------------------------------


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"bwprof {__version__}")
        raise typer.Exit(0)


def _debug_logging() -> None:
    """With BWPROF_DEBUG=1, bwprof's own log lines (each NVML function a GPU lacks, a CUDA
    attribute this CuPy cannot read) go to stderr: what a first run on a new box needs."""
    logger = logging.getLogger("bwprof")
    if os.environ.get("BWPROF_DEBUG") == "1" and not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # a notebook's own root handler would print each line twice


class _StderrHandler(logging.StreamHandler):
    """Writes to sys.stderr as it is at each line, not as it was when the handler was made:
    a second command in one process (tests, notebooks) must not write to a closed stream."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    """Memory-bandwidth and compute/transfer-overlap profiler for GPU servers."""
    _debug_logging()


def main(argv: list[str] | None = None) -> int:
    """Run the app on `argv` (the process's arguments when None) and return the exit code:
    every usage error one line and 2, every interrupt one line and 130. Called without
    `argv` (a console script installed before `bwprof.entry`, `python -m bwprof.cli`), it
    is the process entry point `bwprof.entry.main`, which prepares the process first."""
    global _interrupt_said
    if argv is None:
        from bwprof.entry import main as process_main

        return process_main()
    _interrupt_said = False
    try:
        code = _run_app(argv)
    except KeyboardInterrupt:  # outside any command: while typer builds or parses
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:
        abandon_stdout()  # a half-printed table must not hold the exit on a stalled terminal
        if not _interrupt_said:
            say(interrupted_message())  # typer turns Ctrl-C in a command into a silent 130
    return code


def _one_line_summaries(group: typer.Typer) -> None:
    """Each command's line in its group's --help: the first paragraph of its docstring as
    one line, where typer kept the docstring's line breaks (a summary broke mid-sentence,
    at any terminal width)."""
    import inspect

    for info in group.registered_commands:
        doc = inspect.getdoc(info.callback) if info.callback is not None else None
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.split("\n\n")[0].split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _one_line_summaries(sub.typer_instance)


_one_line_summaries(app)


def _run_app(argv: list[str] | None) -> int:
    tame_terminal_sizes()
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="bwprof", standalone_mode=False)
    except typer.Abort:  # click's word for an interrupt (older click, and EOF at a prompt)
        return EXIT_INTERRUPTED
    except BwprofError as exc:  # outside a command: while typer calls an option's callback
        return _refused(exc)
    except Exception as exc:
        # typer's vendored click raises UsageError subclasses for bad options; they carry
        # format_message() and exit_code. Anything else is a bug and keeps its traceback.
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":
            return EXIT_OK  # typer has already printed the help
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        typer.echo(f"error: {exc.format_message()}{where}", err=True)
        return int(exc.exit_code)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
