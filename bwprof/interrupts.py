"""Every signal that stops a command — Ctrl-C (SIGINT), SIGTERM, SIGHUP (a dropped ssh
session) and SIGQUIT — is handled the same way at every moment: it raises KeyboardInterrupt
in the main thread, so the code that keeps a run's rows on Ctrl-C keeps them for all four.

Steps that must not be torn (finalising system.json, claiming a run folder) run inside
`deferred()`: a signal arriving there is held and raised as soon as the step is done.

A signal that lands while a module is being imported is held until that import ends, too:
raised inside it, the KeyboardInterrupt would reach a compiled module's initialisation
(NumPy's, pandas', pyarrow's), which turns any error into an ImportError or drops it, and the
command would end in a traceback or go on to exit 0 as if nothing had happened.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)

_received: list[str] = []  # names of the stop signals seen since install(), first first
_left_ignored: set[signal.Signals] = set()  # ignored by whoever started us: left so
_deferring = 0
_pending = False
_import_signal: signal.Signals | None = None  # held until the import under way ends
_import_signal_taken_at = -math.inf  # when the held signal was raised
_import_hold_expired = False  # an import held one for IMPORT_HOLD_S: no more holding
_import_lock = threading.RLock()  # the handler and the helper thread that sends it again
_held = False  # hold() in force
_unraised: str | None = None  # a signal held (deferred, or during an import) not raised yet


def install() -> None:
    """Make every stop signal raise KeyboardInterrupt (main thread only; elsewhere a no-op).

    A signal the process was started with ignored stays ignored: `nohup bwprof run` (SIGHUP)
    and a shell script's background job (SIGINT, SIGQUIT) asked for the run to survive it."""
    global _previous_hook
    reset()
    if threading.current_thread() is not threading.main_thread():
        return
    _note_outer_imports(sys._getframe(1))
    if sys.unraisablehook is not _unraisable:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _unraisable
    _left_ignored.clear()
    for signum in STOP_SIGNALS:
        with suppress(OSError, ValueError):  # a signal this platform will not let us catch
            if signal.getsignal(signum) == signal.SIG_IGN:
                _left_ignored.add(signum)
                continue
            signal.signal(signum, _handle)


_previous_hook: Callable[[Any], object] = sys.__unraisablehook__


def _unraisable(info: Any) -> None:
    """sys.unraisablehook. A stop signal whose KeyboardInterrupt was raised inside a
    destructor (llvmlite frees numba's compiler objects in __del__) would be lost there,
    Python only printing it, and the run would go on to exit 0: it is raised again in the
    main thread's code. After a stop signal, what the objects it tore fail to clean up
    ('Exception ignored in ... __del__') is not printed, unless BWPROF_DEBUG=1."""
    if _received and isinstance(info.exc_value, KeyboardInterrupt):
        _raise_again_soon(getattr(signal, _received[-1]))
        return
    if _received and os.environ.get("BWPROF_DEBUG") != "1":
        return
    _previous_hook(info)


def _raise_again_soon(signum: signal.Signals) -> None:
    """The signal again in the main thread, from a helper thread a moment later: raised
    from here it would land in this hook, which Python also only prints."""
    timer = threading.Timer(REARM_DELAY_S, signal.pthread_kill,  # wakes a sleep, too
                            args=(threading.main_thread().ident, signum))
    timer.daemon = True
    with suppress(RuntimeError):  # no new thread at interpreter shutdown: nothing to stop
        timer.start()


REARM_DELAY_S = 0.01


def handled() -> tuple[signal.Signals, ...]:
    """The stop signals bwprof handles: STOP_SIGNALS less those the caller ignored."""
    return tuple(signum for signum in STOP_SIGNALS if signum not in _left_ignored)


def reset() -> None:
    """Forget the signals seen (a second command in one process: tests, notebooks)."""
    global _deferring, _pending, _held, _import_signal, _import_signal_taken_at
    global _import_hold_expired, _unraised
    _received.clear()
    _deferring, _pending, _held, _unraised = 0, False, False, None
    _import_signal, _import_signal_taken_at, _import_hold_expired = None, -math.inf, False


def lost() -> str | None:
    """The stop signal held (by a `deferred()` step, or while a module imported) that never
    became a KeyboardInterrupt: the step ended in an exception and no later one raised it,
    or the command ended before it could be. The entry point exits 130 for it rather than
    the 0 of a command that finished; a signal under `hold()` only counts, never lost."""
    return _unraised


def take_held() -> str | None:
    """Take the stop signal `lost()` names, if any, outside every `deferred()` step: it is
    then neither raised later nor lost, and the caller acts on it (a run's last step marks
    the run interrupted: raised after the run returned, the folder would say it finished).
    A late copy of it, sent again after an import, is the same stop and is dropped."""
    global _pending, _import_signal, _import_signal_taken_at, _unraised
    with _import_lock:
        name = _unraised
        if name is None or _deferring:
            return None
        _pending, _unraised = False, None
        if _import_signal is not None:  # its helper thread stops sending it
            _import_signal, _import_signal_taken_at = None, time.monotonic()
    return name


def _raising(name: str) -> KeyboardInterrupt:
    """The KeyboardInterrupt of a stop signal, which is no longer held."""
    global _unraised
    _unraised = None
    return KeyboardInterrupt(name)


def received() -> str | None:
    """The name of the first stop signal seen ('SIGHUP'), or None."""
    return _received[0] if _received else None


def _handle(signum: int, frame: FrameType | None) -> None:
    global _pending, _import_signal, _import_signal_taken_at, _unraised
    name = signal.Signals(signum).name
    _received.append(name)
    with _import_lock:
        held = _import_signal is not None
        if _deferring:
            _pending = True
            if not _held:
                _unraised = _unraised or name
            if held:  # the deferred step raises it when it ends
                _import_signal, _import_signal_taken_at = None, time.monotonic()
            return
        if held or time.monotonic() - _import_signal_taken_at < _COPY_S:
            if not held or (_importing(frame) and not _import_hold_expired):
                return  # a late copy of the held signal, or the import goes on: sent again
            _import_signal, _import_signal_taken_at = None, time.monotonic()
            raise _raising(name)
        if _importing(frame) and not _import_hold_expired:
            _import_signal = signal.Signals(signum)
            if _raise_after_the_import(signum):
                _unraised = _unraised or name
                return
            _import_signal = None
    raise _raising(name)


IMPORT_HOLD_S = 10.0  # the longest a signal waits for an import to end
_IMPORT_POLL_S = 0.005
_RESEND_S = 0.05  # a signal that lands as the main thread enters a blocking call wakes nothing
_COPY_S = 0.25  # a copy of the held signal this soon after it was raised is the same stop
_IMPORT_MACHINERY = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


_outer_imports: tuple[FrameType, ...] = ()
"""The imports under way when bwprof's handlers went in (a script that calls bwprof.run at
its top level, imported itself): everything bwprof does runs inside them, which is no
import to hold a signal for (it held Ctrl-C for 10 s there)."""


def _import_frames(frame: FrameType | None) -> list[FrameType]:
    frames = []
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_MACHINERY:
            frames.append(frame)
        frame = frame.f_back
    return frames


def _note_outer_imports(frame: FrameType | None) -> None:
    global _outer_imports
    _outer_imports = tuple(_import_frames(frame))


def _importing(frame: FrameType | None) -> bool:
    """Whether `frame` runs inside an import begun since the handlers went in (importlib's
    frames are below it: a module's body, or Python code a compiled module's initialisation
    called), not only inside one that was under way already (`_outer_imports`)."""
    return any(all(inner is not outer for outer in _outer_imports)
               for inner in _import_frames(frame))


def _drop_held_import_signal() -> str | None:
    """Forget a signal held (for an import, or by a step) that was never raised, as the
    handler it was held by goes; its name."""
    global _import_signal, _unraised
    with _import_lock:
        held = _unraised
        _import_signal, _unraised = None, None
    return held


def _main_thread_state(main: int) -> str:
    """'importing', 'running' or 'ended'."""
    frame = sys._current_frames().get(main)
    if frame is None:
        return "ended"
    return "importing" if _importing(frame) else "running"


def _raise_after_the_import(signum: int) -> bool:
    """Send `signum` to the main thread again, from a helper thread, once the main thread
    has left every import, until the handler has raised it there, where nothing can swallow
    it. An import that outlasts IMPORT_HOLD_S (one that hangs) gets it raised inside, as
    before. False where no thread can be started (interpreter shutdown)."""
    main = threading.main_thread().ident
    assert main is not None

    def resend() -> None:
        global _import_hold_expired, _import_signal
        deadline = time.monotonic() + IMPORT_HOLD_S
        while _import_signal is not None:
            if signal.getsignal(signum) is not _handle:  # bwprof's handler is gone
                with _import_lock:  # (lost() still names it: the entry point's 130)
                    _import_signal = None
                return
            state = _main_thread_state(main)
            if state == "ended":
                return
            if state == "importing" and not _import_hold_expired:
                if time.monotonic() > deadline:
                    _import_hold_expired = True
                else:
                    time.sleep(_IMPORT_POLL_S)
                continue
            with _import_lock:
                if _import_signal is None:
                    return
                with suppress(OSError, ValueError):  # the main thread ended meanwhile
                    signal.pthread_kill(main, signum)
            time.sleep(_RESEND_S)

    watcher = threading.Thread(target=resend, name="bwprof-signal-after-import", daemon=True)
    try:
        watcher.start()
    except RuntimeError:
        return False
    return True


@contextmanager
def deferred() -> Iterator[None]:
    """Hold stop signals while the block runs; one that arrived is raised when it ends (when
    the block itself raised, its exception goes on and the signal stays pending for the next
    `deferred()` to end, and `received()` names it)."""
    global _deferring, _pending
    _deferring += 1
    try:
        yield
    except BaseException:
        _deferring -= 1
        raise
    _deferring -= 1
    if not _deferring and _pending:
        _pending = False
        raise _raising(received() or "interrupted")


def hold() -> None:
    """Hold stop signals from now until `unhold()`, as `deferred()` does, and raise none of
    them then: for a fleet rank's last steps, which every rank must take for the merged
    folder to be written (mpirun's SIGTERM reaches every rank at once); a signal there is
    only counted (`received()` names it) and the rank's exit code says it."""
    global _deferring, _held
    if not _held:
        _held = True
        _deferring += 1


def unhold() -> None:
    """End `hold()`; a signal held meanwhile stays counted, not raised."""
    global _deferring, _held, _pending
    if _held:
        _held = False
        _deferring -= 1
        if not _deferring:
            _pending = False


@contextmanager
def handling() -> Iterator[None]:
    """Within a library call (`bwprof.run` in a notebook or script), Ctrl-C handled as
    `install()` handles it, so `deferred()` holds it there too; the caller's handler comes
    back afterwards. A no-op where bwprof's handlers are in already (the CLI installs them
    for the whole process), outside the main thread, or where SIGINT has a handler of the
    caller's own (left as it is: then `deferred()` cannot hold a Ctrl-C)."""
    previous = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread()
            or previous is not signal.default_int_handler):
        yield
        return
    reset()
    _note_outer_imports(sys._getframe(2))  # the caller's (contextmanager's frame between)
    signal.signal(signal.SIGINT, _handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        held = _drop_held_import_signal()  # its resend thread must not flood the caller
    if held:  # held through the call's last import or step and never raised: raised now
        raise KeyboardInterrupt(held)

