"""The process entry point (`bwprof` console script, `python -m bwprof`): signal handlers and
standard-stream guards go in before anything heavy is imported, so a stop signal at any
moment — while typer, rich, pandas and numba load, while options are checked, during the
measurement or while the final table prints — is one line and exit 130, never a traceback
and never a silent exit. Only the standard library and bwprof's small modules load here.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

from bwprof import interrupts
from bwprof.errors import EXIT_INTERRUPTED

_prepared = False
_final_code: int | None = None  # the code the command chose, once it is known


def interrupted_message(detail: str = "", name: str | None = None) -> str:
    """'interrupted', naming the signal (`name`, else the first one received) where it was
    not Ctrl-C: 'interrupted (SIGHUP)'."""
    name = name or interrupts.received()
    head = "interrupted" if name in (None, "SIGINT") else f"interrupted ({name})"
    return head + detail


def say(line: str) -> None:
    """One line on stderr, which may be gone (never raises)."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def prepare_process() -> None:
    """Stop signals raise KeyboardInterrupt; closed descriptors are reopened on /dev/null and
    the standard streams never raise. Once per process."""
    global _prepared
    if _prepared:
        return
    interrupts.install()
    _prepared = True
    atexit.register(_ignore_stop_signals)  # registered first, so it runs last
    from bwprof import stdio

    stdio.install()


_explained = False  # the command's end already said it was interrupted


def _stop_after_the_end(signum: int, frame: FrameType | None) -> None:
    """A stop signal once the command has returned, while threads end and exit functions
    (mpi4py's MPI_Finalize) run: say so, unless the interrupt was said already, and leave
    now with 130, leaving no Python code to raise into."""
    if not _explained:
        line = interrupted_message(name=signal.Signals(signum).name)
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode())
    os._exit(EXIT_INTERRUPTED)


def _set_stop_handlers(handler: signal.Handlers | Callable[[int, FrameType | None], None]
                       ) -> None:
    for signum in interrupts.handled():  # one the caller ignored stays ignored
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, handler)


def _ignore_stop_signals() -> None:
    """The last exit function: Python is about to put every signal it handled back to the
    default action (killed by the signal, SIGQUIT dumping core) for its final teardown,
    which would replace the exit code the command chose; a signal now changes nothing.

    A process that was interrupted leaves here with its code: under `python -m bwprof`,
    CPython ends a process in which a KeyboardInterrupt ever came out of code run by
    exec() (dataclasses, typer, numba's compiler make code that way) by killing itself with
    SIGINT after its teardown, whatever code it chose (130 turned into -2, for SIGTERM too).
    Every other exit function has run by now; only the interpreter's teardown is skipped."""
    _set_stop_handlers(signal.SIG_IGN)
    if _final_code is not None and (_final_code == EXIT_INTERRUPTED or interrupts.received()):
        from bwprof import stdio

        stdio.flush()
        os._exit(_final_code)


def _after_the_command(code: int) -> int:
    """Late signals now go to `_stop_after_the_end`, and the streams are flushed."""
    global _explained
    _explained = code == EXIT_INTERRUPTED
    _set_stop_handlers(_stop_after_the_end)
    from bwprof import stdio

    stdio.flush()
    return code


def _interrupted() -> int:
    """A KeyboardInterrupt that reached the entry point (bwprof was still importing, or
    the command had just returned): one line, and a signal meanwhile cannot raise into it."""
    global _explained
    _set_stop_handlers(_stop_after_the_end)
    if not _explained:
        _explained = True
        from bwprof import stdio

        stdio.abandon_stdout()
        say(interrupted_message())
    return EXIT_INTERRUPTED


def _run() -> int:
    prepare_process()
    from bwprof.cli import main as cli_main

    return _after_the_command(cli_main(sys.argv[1:]))


def main() -> int:
    """Run `bwprof` with the arguments of this process; the exit code."""
    global _final_code
    try:
        try:
            code = _run()
        except KeyboardInterrupt:
            code = _interrupted()
    except KeyboardInterrupt:  # a second signal while the first was being handled
        code = _interrupted()
    _final_code = code
    if _a_gpu_stopped_answering():
        from bwprof import stdio

        stdio.flush()  # the files are written: nothing is left to do but CUDA's teardown
        os._exit(code)
    return code


def _a_gpu_stopped_answering() -> bool:
    """Whether a GPU of this process missed its deadline (`runtime.STOPPED_GPUS`): CUDA's
    teardown at exit (destroying its context, freeing its memory) would wait for it, and
    the command would hang after saying it had finished."""
    runtime = sys.modules.get("bwprof.gpu.runtime")
    return bool(getattr(runtime, "STOPPED_GPUS", None))
