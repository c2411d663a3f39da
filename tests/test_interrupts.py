"""Every stop signal becomes KeyboardInterrupt, and deferred() holds one until its step ends."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time

import pytest

from bwprof import interrupts

pytestmark = pytest.mark.usefixtures("stop_signals")  # tests/conftest.py


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"])
def test_each_stop_signal_raises_keyboard_interrupt_and_is_named(name):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), getattr(signal, name))
        for _ in range(1000):  # the handler runs between bytecodes of the main thread
            pass
    assert interrupts.received() == name


def test_deferred_holds_the_signal_until_the_step_is_done():
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
        steps.append("finished the step")
    assert steps == ["finished the step"]
    assert interrupts.received() == "SIGTERM"


def test_deferred_nests_and_raises_only_when_the_outer_step_ends():
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):
                pass
        steps.append("outer step went on")
    assert steps == ["outer step went on"]


def test_an_error_inside_a_deferred_step_is_not_replaced_by_the_signal():
    with pytest.raises(OSError), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        raise OSError("disk full")
    assert interrupts.received() == "SIGINT"


# Catches (issue 37): a signal held in a step that then failed stayed pending until some later
# step, or the end of `handling()`, raised it: after a run had returned, beside a folder
# that said it finished. take_held() hands it to the run's last step instead, once
def _held_in_a_failed_step(signum: signal.Signals) -> None:
    with pytest.raises(OSError), interrupts.deferred():
        os.kill(os.getpid(), signum)
        for _ in range(1000):
            pass
        raise OSError("disk full")


def test_take_held_takes_a_signal_held_in_a_failed_step_once():
    _held_in_a_failed_step(signal.SIGHUP)
    assert interrupts.lost() == "SIGHUP"
    assert interrupts.take_held() == "SIGHUP"
    assert interrupts.lost() is None and interrupts.take_held() is None
    with interrupts.deferred():  # taken: no later step raises it
        pass
    assert interrupts.received() == "SIGHUP"


def test_take_held_inside_a_step_leaves_the_signal_to_the_step():
    _held_in_a_failed_step(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        assert interrupts.take_held() is None
    assert interrupts.lost() is None


def test_without_a_signal_deferred_is_transparent():
    with interrupts.deferred():
        pass
    assert interrupts.received() is None


# Catches (the review): under `bwprof.run` in a notebook nobody installed bwprof's handlers,
# so deferred() held nothing and a Ctrl-C could land between a row's write and its count
def test_handling_holds_ctrl_c_in_a_library_call_and_gives_the_handler_back():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupts.handling(), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        steps.append("the step ended")
    assert steps == ["the step ended"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_handling_leaves_a_handler_of_the_callers_own_alone():
    def own(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, own)
    with interrupts.handling():
        assert signal.getsignal(signal.SIGINT) is own
    assert signal.getsignal(signal.SIGINT) is own


@pytest.mark.parametrize("name", ["SIGINT", "SIGHUP", "SIGQUIT"])
def test_a_signal_the_caller_ignored_stays_ignored(name):
    """`nohup bwprof run` ignores SIGHUP, a script's `bwprof run &` SIGINT and SIGQUIT: the
    caller asked the run to survive them, so install() must not turn them back on."""
    signum = getattr(signal, name)
    signal.signal(signum, signal.SIG_IGN)
    interrupts.install()
    assert signal.getsignal(signum) == signal.SIG_IGN
    assert signum not in interrupts.handled()
    os.kill(os.getpid(), signum)
    for _ in range(1000):
        pass
    assert interrupts.received() is None
    assert set(interrupts.handled()) == set(interrupts.STOP_SIGNALS) - {signum}


class _FreedWithASignal:
    """An object whose destructor is running when the signal lands (llvmlite's ObjectRef
    under numba: the compiler frees its objects in __del__)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass


def test_a_signal_inside_a_destructor_is_not_lost():
    """Python prints an exception raised in __del__ and drops it: the run would go on and
    exit 0 although it was told to stop."""
    with pytest.raises(KeyboardInterrupt):
        _FreedWithASignal()  # freed at once, its __del__ signalled
        # The signal comes back from a timer thread REARM_DELAY_S later and wakes this
        # sleep; on a loaded machine the thread may run seconds late: the sleep only bounds
        # the wait for it.
        time.sleep(120)
    assert interrupts.received() == "SIGTERM"


class _TornByTheSignal:
    def __del__(self):
        raise AttributeError("'Half' object has no attribute '_as_parameter_'")


def test_after_a_signal_a_torn_object_s_cleanup_is_not_printed(monkeypatch):
    seen = []
    monkeypatch.setattr(interrupts, "_previous_hook", seen.append)
    _TornByTheSignal()
    assert len(seen) == 1  # before any signal: Python's own report, as ever
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(1000):
            pass
    _TornByTheSignal()
    assert len(seen) == 1
    monkeypatch.setenv("BWPROF_DEBUG", "1")
    _TornByTheSignal()
    assert len(seen) == 2


# A compiled module's initialisation (NumPy's, pandas', pyarrow's) calls Python code and takes
# any error there for "could not import" (PyCapsule_Import) or drops it: a KeyboardInterrupt
# raised inside it became an ImportError, or nothing at all, and the command went on to exit 0.
_INITIALISES = '''
import os
import signal

try:
    os.kill(os.getpid(), signal.{name})
    for _ in range(10 ** 5):  # the handler runs between bytecodes: here, inside the import
        pass
except BaseException as exc:
    {treatment}
INITIALISED = True
'''
_TREATMENTS = {"dropped": "pass", "turned into ImportError": "raise ImportError('init') from exc"}


def _importable(tmp_path, monkeypatch, module: str, text: str) -> None:
    (tmp_path / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)


@pytest.mark.parametrize("treatment", sorted(_TREATMENTS))
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_a_module_initialises_is_raised_once_the_import_ends(
        tmp_path, monkeypatch, name, treatment):
    module = f"initialises_{name}_{treatment.split()[0]}"
    _importable(tmp_path, monkeypatch, module,
                _INITIALISES.format(name=name, treatment=_TREATMENTS[treatment]))
    steps = []
    with pytest.raises(KeyboardInterrupt):
        try:
            importlib.import_module(module)
            steps.append("imported")
        except ImportError:  # as pandas takes an optional module it could not import
            steps.append("import failed")
        time.sleep(10)  # the signal comes back from a helper thread and wakes this sleep
    time.sleep(0.15)  # and comes back once: no second KeyboardInterrupt while this cleans up
    assert steps == ["imported"]  # the module was not torn
    assert sys.modules[module].INITIALISED
    assert interrupts.received() == name
    monkeypatch.delitem(sys.modules, module)


_HANGS = '''
import os
import signal

os.kill(os.getpid(), signal.SIGTERM)
import time
time.sleep(30)
'''


def test_an_import_that_hangs_gets_the_signal_after_the_hold(tmp_path, monkeypatch):
    """An import that never ends must not hold a stop for ever: IMPORT_HOLD_S later the signal
    is raised inside it."""
    monkeypatch.setattr(interrupts, "IMPORT_HOLD_S", 0.2)
    _importable(tmp_path, monkeypatch, "hangs_in_import", _HANGS)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module("hangs_in_import")
    assert time.monotonic() - started < 20
    assert "hangs_in_import" not in sys.modules


def test_a_signal_held_by_a_step_that_failed_is_lost_until_a_later_step_raises_it():
    with pytest.raises(OSError), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
        raise OSError("disk full")
    assert interrupts.lost() == "SIGTERM"  # the entry point exits 130 for it, not 0
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        pass
    assert interrupts.lost() is None


def test_a_raised_or_only_counted_signal_is_not_lost():
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    assert interrupts.lost() is None  # raised: monitor's Ctrl-C, its normal end, stays 0
    interrupts.hold()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    finally:
        interrupts.unhold()
    assert interrupts.received() == "SIGINT" and interrupts.lost() is None  # hold(): counts


def test_ctrl_c_held_by_a_library_calls_last_import_is_raised_once_not_resent(tmp_path,
                                                                               monkeypatch):
    """bwprof.run in a notebook: a Ctrl-C during the call's last import was held, and its
    resend thread went on sending SIGINT to the caller's own handler every 50 ms for the
    life of the process (the review counted 21 KeyboardInterrupts a second)."""
    (tmp_path / "slow_to_import_under_ctrl_c.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.05)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt), interrupts.handling():
        importlib.import_module("slow_to_import_under_ctrl_c")
    time.sleep(0.4)  # a resent SIGINT would raise here, in the caller's code
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_command_called_from_a_module_being_imported_is_not_held_as_an_import(
        tmp_path, monkeypatch):
    """A script that runs bwprof at its top level, itself imported (`python -c "import
    bench"`): everything bwprof did ran inside that import, so a Ctrl-C was held 10 s."""
    (tmp_path / "runs_bwprof_at_import.py").write_text(
        "import os, signal\n"
        "from bwprof import interrupts\n"
        "interrupts.install()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    for _ in range(10 ** 6):\n"
        "        pass\n"
        "    RAISED = False\n"
        "except KeyboardInterrupt:\n"
        "    RAISED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("runs_bwprof_at_import")
    assert module.RAISED  # at once, inside the script's own code
