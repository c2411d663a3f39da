"""`python -m bwprof`: the same entry point as the `bwprof` console script.

Stop signals are handled before bwprof imports anything: `bwprof.entry` and the small modules
it loads take milliseconds (far longer on a loaded machine), and a signal meanwhile, with
Python's defaults, was a KeyboardInterrupt traceback (SIGINT) or a death by the signal
(SIGTERM, SIGHUP: exit -15, -1). Until `bwprof.entry` puts its own handlers in, a stop signal
is `interrupted` (naming the signal where it was not Ctrl-C) and exit 130 at once: nothing has
been written yet. Only modules Python itself has loaded at start-up are used here.
"""

import contextlib
import os
import signal
import sys

_EXIT_INTERRUPTED = 130  # bwprof.errors.EXIT_INTERRUPTED, which is not loaded yet
_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")  # bwprof.interrupts.STOP_SIGNALS


def _stop_before_bwprof_loads(signum: int, frame: object) -> None:
    """A stop signal before bwprof's handlers are in: its one line, exit 130, now."""
    name = signal.Signals(signum).name
    line = "interrupted" if name == "SIGINT" else f"interrupted ({name})"
    with contextlib.suppress(OSError):  # stderr closed: the exit code still says it
        os.write(2, (line + "\n").encode())
    os._exit(_EXIT_INTERRUPTED)


def _handle_stop_signals_now() -> None:
    """Each stop signal the process was not started with ignored (`nohup`, a shell's
    background job: left ignored, as `bwprof.interrupts.install` leaves it) ends it at once."""
    for name in _STOP_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        with contextlib.suppress(OSError, ValueError):  # one this platform will not let us catch
            if signal.getsignal(signum) != signal.SIG_IGN:
                signal.signal(signum, _stop_before_bwprof_loads)


if __name__ == "__main__":
    _handle_stop_signals_now()

    from bwprof.entry import main

    sys.exit(main())
