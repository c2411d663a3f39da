"""Registry of every measurement bwprof knows, declared as data.

A case has a stable snake_case key (selectable by key or prefix), a one-line description, the
hardware it needs and how its bytes are counted. Implementations live in `bwprof.host` and
`bwprof.gpu`; kernels never compute bandwidth, the runner does from `bytes_factor`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from bwprof.errors import BwprofError

Target = Literal["host", "gpu", "mpi"]
ByteConvention = Literal["copy", "traffic"]


@dataclass(frozen=True)
class CaseSpec:
    key: str
    description: str
    target: Target
    memory: str
    direction: str
    byte_convention: ByteConvention
    bytes_factor: int
    """Bytes counted per operation = bytes_factor × bytes of one buffer (STREAM: arrays touched)."""
    min_gpus: int = 0
    whole_node: bool = False
    """Needs every GPU of the node at once (all-GPU and GPU-to-GPU cases): a fleet rank that
    holds one GPU of its node (several ranks a node) cannot run it."""

    def bytes_per_op(self, buffer_bytes: int) -> int:
        return self.bytes_factor * buffer_bytes


def _ddr(name: str, what: str, arrays: int) -> CaseSpec:
    return CaseSpec(
        key=f"ddr_{name}",
        description=f"host DDR STREAM {what}, float64, Numba parallel threads",
        target="host",
        memory="ddr",
        direction="within",
        byte_convention="traffic",
        bytes_factor=arrays,
    )


def _hbm(name: str, what: str, arrays: int) -> CaseSpec:
    return CaseSpec(
        key=f"hbm_{name}",
        description=f"device HBM STREAM {what}, float64, Numba CUDA kernel",
        target="gpu",
        memory="hbm",
        direction="within",
        byte_convention="traffic",
        bytes_factor=arrays,
        min_gpus=1,
    )


def _gpu(key: str, description: str, memory: str, direction: str, convention: ByteConvention,
         factor: int = 1, min_gpus: int = 1, whole_node: bool = False) -> CaseSpec:
    return CaseSpec(key, description, "gpu", memory, direction, convention, factor, min_gpus,
                    whole_node)


CASES: tuple[CaseSpec, ...] = (
    _ddr("copy", "Copy c = a", 2),
    _ddr("scale", "Scale b = s*c", 2),
    _ddr("add", "Add c = a + b", 3),
    _ddr("triad", "Triad a = b + s*c", 3),
    _ddr("dot", "Dot sum(a*b)", 2),
    _gpu("h2d_pinned", "host-to-device copy-engine copy from pinned host memory",
         "pinned", "h2d", "copy"),
    _gpu("d2h_pinned", "device-to-host copy-engine copy into pinned host memory",
         "pinned", "d2h", "copy"),
    _gpu("h2d_pageable", "host-to-device copy from ordinary (pageable) host memory",
         "pageable", "h2d", "copy"),
    _gpu("d2h_pageable", "device-to-host copy into ordinary (pageable) host memory",
         "pageable", "d2h", "copy"),
    _gpu("bidir_pinned", "host-to-device and device-to-host at once on two streams (pinned)",
         "pinned", "both", "copy"),
    _gpu("d2d_copy", "device-to-device copy within one GPU by the copy engine",
         "hbm", "within", "traffic", factor=2),
    _hbm("copy", "Copy c = a", 2),
    _hbm("scale", "Scale b = s*c", 2),
    _hbm("add", "Add c = a + b", 3),
    _hbm("triad", "Triad a = b + s*c", 3),
    _hbm("dot", "Dot sum(a*b)", 2),
    _gpu("h2d_all", "host-to-device on every GPU at once, each from its own NUMA node",
         "pinned", "h2d", "copy", whole_node=True),
    _gpu("d2h_all", "device-to-host on every GPU at once, each to its own NUMA node",
         "pinned", "d2h", "copy", whole_node=True),
    _gpu("p2p_copy", "GPU i to GPU j for every ordered pair, peer access on",
         "hbm", "p2p", "copy", min_gpus=2, whole_node=True),
    _gpu("p2p_bidir", "GPU i to GPU j and j to i at once for every pair, peer access on",
         "hbm", "both", "copy", min_gpus=2, whole_node=True),
    _gpu("overlap_h2d_compute", "pinned host-to-device copy and a compute kernel at once",
         "pinned", "h2d+compute", "copy"),
    _gpu("overlap_d2h_compute", "pinned device-to-host copy and a compute kernel at once",
         "pinned", "d2h+compute", "copy"),
    _gpu("overlap_bidir_compute", "H2D, D2H and a compute kernel at once on three streams",
         "pinned", "h2d+d2h+compute", "copy"),
    _gpu("overlap_pageable", "pageable host-to-device copy and a compute kernel at once",
         "pageable", "h2d+compute", "copy"),
    _gpu("pipeline_chunked", "data-loader loop: chunks in, compute, out on 1, 2, 4 streams",
         "pinned", "h2d+compute+d2h", "copy"),
    CaseSpec("net_p2p", "MPI point-to-point bandwidth from rank 0 to every other rank (fleet)",
             "mpi", "host", "net", "copy", 1),
)

CASES_BY_KEY: dict[str, CaseSpec] = {case.key: case for case in CASES}


def get_case(key: str) -> CaseSpec:
    try:
        return CASES_BY_KEY[key]
    except KeyError:
        raise BwprofError(f"unknown case {key!r}; valid cases: {', '.join(CASES_BY_KEY)}") from None


def select_cases(selection: str | Iterable[str] | None,
                 fleet: bool = False) -> tuple[CaseSpec, ...]:
    """Cases named by comma-separated keys or key prefixes, in registry order.

    `None` selects every case that applies: the fleet (MPI) cases only in a fleet run, so a
    single box does not list a waived network row. An entry that matches nothing is an error
    naming the valid keys.
    """
    if selection is None:
        return tuple(c for c in CASES if fleet or c.target != "mpi")
    tokens = selection.split(",") if isinstance(selection, str) else list(selection)
    tokens = [token.strip() for token in tokens if token.strip()]
    if not tokens:
        raise BwprofError(f"--cases is empty; valid cases: {', '.join(CASES_BY_KEY)}")
    chosen: set[str] = set()
    for token in tokens:
        matches = [key for key in CASES_BY_KEY if key == token or key.startswith(token)]
        if not matches:
            raise BwprofError(
                f"unknown case or prefix {token!r}; valid cases: {', '.join(CASES_BY_KEY)}"
            )
        chosen.update(matches)
    return tuple(case for case in CASES if case.key in chosen)
