"""The catalogue of every measurement bwprof knows, declared as data, and its selection.

A case has a stable snake_case key (selectable by key or prefix), a one-line description, the
hardware it needs, its metric and how its bytes are counted (`bwprof.casespec.CaseSpec`). The
DDR and fleet cases are declared here; the host latency cases and the GPU cases, with how
they run, in `bwprof.host.cases` and `bwprof.gpu.cases`. Kernels never compute figures: the
runner does, from `bytes_factor` or the work of one operation.
"""

from __future__ import annotations

from collections.abc import Iterable

from bwprof.casespec import ByteConvention, CaseSpec, Target
from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.gpu.cases import GPU_CASES
from bwprof.host.cases import HOST_CASES

__all__ = ["CASES", "CASES_BY_KEY", "ByteConvention", "CaseSpec", "Target", "get_case",
           "select_cases"]


def _ddr(name: str, what: str, arrays: int, copied: int | None = None,
         headline: bool = False) -> CaseSpec:
    return CaseSpec(
        key=f"ddr_{name}",
        description=f"host DDR STREAM {what}, float64, Numba parallel threads",
        target="host",
        memory="ddr",
        direction="within",
        byte_convention="traffic",
        bytes_factor=arrays,
        copied_factor=copied,
        headline=headline,
    )


CASES: tuple[CaseSpec, ...] = (
    _ddr("copy", "Copy c = a", 2, copied=1),
    _ddr("scale", "Scale b = s*c", 2),
    _ddr("add", "Add c = a + b", 3),
    _ddr("triad", "Triad a = b + s*c", 3, headline=True),
    _ddr("dot", "Dot sum(a*b)", 2),
    *HOST_CASES,
    *GPU_CASES,
    CaseSpec("net_p2p", "MPI point-to-point bandwidth between ranks, one pair at a time: a "
             "ring both ways plus 2 sampled pairs per rank, or every pair with --all-pairs "
             "(fleet)",
             "mpi", "host", "net", "copy", 1, copied_factor=1, headline=True),
)

CASES_BY_KEY: dict[str, CaseSpec] = {case.key: case for case in CASES}


def copy_shares() -> dict[str, float]:
    """Bytes copied over bytes counted (`CaseSpec.copy_share`) of every case that copies:
    what turns a row's GB/s into its copy-convention GB/s."""
    return {case.key: share for case in CASES if (share := case.copy_share) is not None}


def get_case(key: str) -> CaseSpec:
    try:
        return CASES_BY_KEY[key]
    except KeyError:
        raise BwprofError(f"unknown case {shorten(key)!r}{_near(key)}; `bwprof list` "
                          "shows every case key") from None


_WHICH = ("give case keys or prefixes (ddr_, hbm_, h2d_, ...); `bwprof list` shows every "
          "case and whether it can run here")


def _near(token: str) -> str:
    """' (did you mean KEY?)' for a key close to a mistyped one; '' where none is."""
    import difflib

    close = difflib.get_close_matches(token.lower(), list(CASES_BY_KEY), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def select_cases(selection: str | Iterable[str] | None,
                 fleet: bool = False) -> tuple[CaseSpec, ...]:
    """Cases named by comma-separated keys or key prefixes, in registry order. A whole key
    selects that case only, though it is the prefix of others (`lat_gpu`, `lat_gpu_loaded`).

    `None` selects every case that applies: the fleet (MPI) cases only in a fleet run, so a
    single box does not list a waived network row. An entry that matches nothing is an error
    that names the nearest key, if one is near, and `bwprof list` (the whole list of keys
    made a line of 600 characters).
    """
    if selection is None:
        return tuple(c for c in CASES if fleet or c.target != "mpi")
    tokens = selection.split(",") if isinstance(selection, str) else list(selection)
    tokens = [token.strip() for token in tokens if token.strip()]
    if not tokens:
        raise BwprofError(f"--cases is empty; {_WHICH}")
    chosen: set[str] = set()
    for token in tokens:
        # A whole key means that case alone (`lat_host`, not `lat_host_numa` with it).
        matches = ([token] if token in CASES_BY_KEY
                   else [key for key in CASES_BY_KEY if key.startswith(token)])
        if not matches:
            raise BwprofError(f"unknown case or prefix {shorten(token)!r}{_near(token)}; "
                              f"{_WHICH}")
        chosen.update(matches)
    return tuple(case for case in CASES if case.key in chosen)
