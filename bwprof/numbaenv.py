"""Numba's environment, checked before numba is imported: numba reads NUMBA_* variables at
import and fails there with a traceback (NUMBA_NUM_THREADS=0: "Number of threads specified
must be > 0.") or warns and ignores them ('abc'). bwprof says what is wrong in one line, and
caps its default thread count at what numba will run.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping

from bwprof.coerce import shorten
from bwprof.errors import BwprofError

NUM_THREADS = "NUMBA_NUM_THREADS"
MAX_THREADS = 65536
"""More threads than any machine has CPUs: a larger value is a typo, not a setting."""


def num_threads_setting(environ: Mapping[str, str] | None = None) -> int | None:
    """NUMBA_NUM_THREADS as numba will read it (None where unset), or a one-line
    BwprofError where numba would refuse it (0, -1) or ignore it with a warning ('abc')."""
    raw = (os.environ if environ is None else environ).get(NUM_THREADS)
    if raw is None:
        return None
    match = re.fullmatch(r"\s*\+?(\d{1,6})\s*", raw)
    if match is None or not 1 <= int(match.group(1)) <= MAX_THREADS:
        raise BwprofError(
            f"{NUM_THREADS}={shorten(raw)!r} is not a thread count numba accepts; set it to "
            f"a whole number from 1 to {MAX_THREADS}, or unset it (numba then uses every CPU "
            f"this process may use)")
    return int(match.group(1))


def thread_limit() -> int | None:
    """The most threads numba's parallel kernels may use: numba's own setting once it is
    imported (set_num_threads cannot go above it), else NUMBA_NUM_THREADS; None: no limit
    beyond the CPUs."""
    config = getattr(sys.modules.get("numba"), "config", None)
    loaded = getattr(config, "NUMBA_NUM_THREADS", None)
    if isinstance(loaded, int) and loaded >= 1:
        return loaded
    return num_threads_setting()


def _numba_variables() -> list[str]:
    return sorted(f"{name}={shorten(value)!r}" for name, value in os.environ.items()
                  if name.startswith("NUMBA_"))


def import_numba() -> None:
    """Import numba now, so that a NUMBA_* variable it cannot use is one line (BwprofError)
    rather than a traceback at some later import. Warnings other than numba's "could not be
    parsed" about a variable are passed on."""
    num_threads_setting()
    if "numba" in sys.modules:
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import numba  # noqa: F401
        except Exception as exc:
            variables = _numba_variables()
            if not variables:
                raise
            raise BwprofError(
                f"numba failed to load ({type(exc).__name__}: {shorten(str(exc), 120)}) with "
                f"{', '.join(variables)} set; fix or unset them") from None
    _check_threading_layer()
    for warning in caught:
        text = str(warning.message)
        unparsed = re.match(r"Environment variable '(NUMBA_\w+)' is defined but its "
                            r"associated value '(.*?)' could not be parsed", text, re.S)
        if unparsed:
            raise BwprofError(f"{unparsed.group(1)}={shorten(unparsed.group(2))!r} is not a "
                              f"value numba can read; fix or unset it")
        warnings.warn_explicit(warning.message, warning.category, warning.filename,
                               warning.lineno)


THREADING_VARIABLES = ("NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY")


def _check_threading_layer() -> None:
    """Where the user chose numba's threading layer, start it now: an unknown name
    ('nosuch') or one this install lacks ('tbb' without TBB) is one line here, rather than
    a ValueError in every host case's row (exit 1) once the run is under way."""
    chosen = [f"{name}={shorten(os.environ[name])!r}" for name in THREADING_VARIABLES
              if name in os.environ]
    if not chosen:
        return
    try:
        from numba.np.ufunc.parallel import _launch_threads
    except ImportError:  # another numba's layout: its first parallel kernel will tell
        return
    try:
        _launch_threads()
    except (ValueError, ImportError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BwprofError(f"numba cannot start its threads with {', '.join(chosen)} set "
                          f"({shorten(first, 120)}); fix or unset it (the default picks the "
                          "layer this install has)") from None
