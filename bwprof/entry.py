"""The process entry point (`bwprof` console script, `python -m bwprof`): signal handlers and
standard-stream guards go in before anything heavy is imported, so a stop signal at any
moment — while typer, rich, pandas and numba load, while options are checked, during the
measurement or while the final table prints — is one line and exit 130, never a traceback
and never a silent exit. Only the standard library and bwprof's small modules load here.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from bwprof import interrupts
from bwprof.errors import EXIT_INTERRUPTED, EXIT_OUTPUT, OUT_OF_FILES

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
    if _final_code is not None and _final_code == 0 and interrupts.lost():
        _say_interrupted()  # held during the command's last import, never raised: not 0
        _leave_with(EXIT_INTERRUPTED)
    if _final_code is not None and (_final_code == EXIT_INTERRUPTED or interrupts.received()):
        _leave_with(_final_code)


def _leave_with(code: int) -> NoReturn:
    from bwprof import stdio

    stdio.flush()
    os._exit(code)


def _say_interrupted() -> None:
    global _explained
    if not _explained:
        _explained = True
        say(interrupted_message())


def _after_the_command(code: int) -> int:
    """Late signals now go to `_stop_after_the_end`, and the streams are flushed."""
    global _explained
    _explained = code == EXIT_INTERRUPTED
    if code == 0 and interrupts.lost():  # a stop signal the command held and never raised
        _say_interrupted()
        code = EXIT_INTERRUPTED
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


GC_THRESHOLDS = (50_000, 20, 20)
"""The cyclic garbage collector runs after 50,000 new objects, not Python's 700 (as mypy
sets it): a command makes millions of short-lived objects (typer, pandas, matplotlib's
artists), and with the default the collector ran 500 times in one `bwprof report`, about a
quarter of its CPU time, re-examining the same long-lived objects. What it may hold back
until the next run is cyclic garbage of at most that many objects (a few MB)."""


def _run() -> int:
    prepare_process()
    _one_blas_thread(sys.argv[1:])
    _arrow_pool_within_limit()
    _blas_buffer_first(sys.argv[1:])
    gc.set_threshold(*GC_THRESHOLDS)
    from bwprof.cli import main as cli_main

    return _after_the_command(cli_main(sys.argv[1:]))


READING_COMMANDS = frozenset({"report", "compare", "accept", "history", "trend", "export",
                              "list", "info", "salvage"})
"""The commands that only read run folders and the history store (salvage: the ranks' folders,
merged as rank 0 would): no sizeable linear algebra."""
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def _one_blas_thread(argv: list[str]) -> None:
    """OpenBLAS, which NumPy loads, gives every core a thread and every thread a buffer of
    tens of MB; under an address-space limit (`ulimit -v`, a batch job's) on a many-core box
    one of those allocations fails and OpenBLAS ends the process itself (exit 1, its own
    message), where Python cannot catch it. A reading command, where the user set none of
    BLAS_THREAD_VARIABLES, runs OpenBLAS on one thread; `run` (host GEMM on every thread) is
    left alone. Before NumPy is imported: OpenBLAS reads it once, as it loads."""
    if _command(argv) in READING_COMMANDS and not any(v in os.environ
                                                      for v in BLAS_THREAD_VARIABLES):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def _arrow_pool_within_limit() -> None:
    """pyarrow's own allocator (mimalloc or jemalloc) reserves about a gigabyte of address
    space as it starts, used or not: under an address-space limit (`ulimit -v`, a batch
    job's) a report of a hundred rows then ran out of memory at 1.5 GB (exit 3). Under a
    limit, where the user chose no pool, pyarrow takes the C library's allocator, which
    reserves only what it uses. Before pyarrow is imported: it reads the variable once."""
    if _address_space_limit() is not None and ARROW_POOL_VARIABLE not in os.environ:
        os.environ[ARROW_POOL_VARIABLE] = "system"


def _command(argv: list[str]) -> str | None:
    return next((arg for arg in argv if not arg.startswith("-")), None)


BLAS_BUFFER_ROOM = 64 * 2**20
"""Address space OpenBLAS's first call takes for its buffer (32 MiB on one thread), with room."""


def _blas_buffer_first(argv: list[str]) -> None:
    """Under an address-space limit, a reading command has OpenBLAS take its buffer now, while
    the most room is left: taken late (matplotlib's first transform, once pandas and pyarrow
    hold most of the limit), its allocation fails and OpenBLAS ends the process itself (exit
    1). A limit that leaves no room for it is a MemoryError here: `_no_memory`'s one line."""
    limit = _address_space_limit()
    if limit is None or _command(argv) not in READING_COMMANDS:
        return
    import numpy

    used = _address_space_used()
    if used is not None and limit - used < BLAS_BUFFER_ROOM:
        raise MemoryError("no room left for OpenBLAS's buffer")
    numpy.ones((2, 2)) @ numpy.ones((2, 2))


def _address_space_used() -> int | None:
    """This process's address space in bytes (VmSize), None where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


_NO_MEMORY_WORDS = ("cannot allocate memory", "failed to map segment", "out of memory",
                    "bad_alloc", "memory allocation failed")


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling, says memory ran
    out: a MemoryError (pyarrow's ArrowMemoryError too), ENOMEM, or a library that could not
    be loaded for want of address space ('failed to map segment from shared object')."""
    for _ in range(20):  # a chain, not a loop
        if exc is None:
            return False
        if isinstance(exc, MemoryError):
            return True
        if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
            return True
        if isinstance(exc, (ImportError, OSError, SystemError)):
            try:
                text = str(exc).lower()
            except MemoryError:
                return True
            if any(words in text for words in _NO_MEMORY_WORDS):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


_NO_FILES_WORDS = "too many open files"


def _out_of_files(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from or while handling, says the process
    ran out of file descriptors: EMFILE (its own limit, `ulimit -n`) or ENFILE (the system's),
    from a file opened or a module imported late (a run's HTML writer, as it writes the report
    files), or a compiled module's import that words it ('Too many open files'). A resource
    that ran out, as memory does: no bug, so no traceback."""
    for _ in range(20):  # a chain, not a loop
        if exc is None:
            return False
        if isinstance(exc, OSError) and exc.errno in OUT_OF_FILES:
            return True
        if isinstance(exc, (ImportError, OSError)):
            with contextlib.suppress(Exception):
                if _NO_FILES_WORDS in str(exc).lower():
                    return True
        exc = exc.__cause__ or exc.__context__
    return False


def _soft_limit(name: str) -> int | None:
    """This process's soft limit `name` of the `resource` module (RLIMIT_AS, RLIMIT_NOFILE),
    None where unlimited or unknown (`resource` is a compiled module, which cannot load once
    no descriptor is left)."""
    try:
        import resource

        soft, _hard = resource.getrlimit(getattr(resource, name))
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def _open_files_limit() -> int | None:
    """The open-file limit of this process (`ulimit -n`), None where unlimited or unknown."""
    return _soft_limit("RLIMIT_NOFILE")


def _no_files(exc: BaseException) -> int:
    """One line for a command that ran out of file descriptors, and exit code 3 (out of
    resources): what it wrote before is whole (every file is written whole or not at all; a
    run's rows as they finish, so a run that got as far as its report files keeps them all)."""
    limit = _open_files_limit()
    under = f" under a limit of {limit} (ulimit -n)" if limit is not None else ""
    what = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    say(f"error: bwprof ran out of open files{under} ({what}); raise the limit (ulimit -n "
        "1024) and run it again (every file it wrote is whole; a run keeps its finished rows)")
    return EXIT_OUTPUT


def _address_space_limit() -> int | None:
    """The address-space limit of this process in bytes (`ulimit -v`), None where unlimited."""
    return _soft_limit("RLIMIT_AS")


def _no_memory(exc: BaseException) -> int:
    """One line for a command that ran out of memory, and exit code 3: what it wrote before
    is whole (every file is written whole or not at all; a run's rows as they finish)."""
    try:
        limit = _address_space_limit()
        under = (f" under an address-space limit of {limit / 2**20:.0f} MiB (ulimit -v)"
                 if limit is not None else "")
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:200] if str(exc) else ""
        say(f"error: bwprof ran out of memory{under}{f' ({what})' if what else ''}; give it "
            "more memory and run it again (every file it wrote is whole)")
    except MemoryError:
        with contextlib.suppress(OSError):
            os.write(2, b"error: bwprof ran out of memory; give it more memory\n")
    return EXIT_OUTPUT


def _leave_now(code: int) -> NoReturn:
    """Exit functions run, then the process ends without the interpreter's teardown: a
    compiled module left half-loaded for want of memory crashed it (SIGSEGV after the line)."""
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    with contextlib.suppress(Exception):
        from bwprof import stdio

        stdio.flush()
    os._exit(code)


def main() -> int:
    """Run `bwprof` with the arguments of this process; the exit code. Memory or file
    descriptors that run out are one line and exit 3 (`_no_memory`, `_no_files`), not a
    traceback."""
    global _final_code
    try:
        try:
            code = _run()
        except KeyboardInterrupt:
            code = _interrupted()
        except Exception as exc:
            if _out_of_memory(exc):
                _final_code = _no_memory(exc)
            elif _out_of_files(exc):
                _final_code = _no_files(exc)
            else:
                raise
            _leave_now(_final_code)
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
