"""A load from a raw device address inside a CUDA kernel: what a pointer chase steps with.

Numba indexes arrays only (`chain[i]` is the base plus i x 8: a shift and an add, LEA and
LEA.HI.X in SASS, between every two dependent loads of a chase). `load_u64(address)` is one
`ld.global.u64 %rd, [%rd]` instead: an LLVM intrinsic that turns the uint64 into a pointer in
the global address space (1) and loads through it, so the value a load returns is the next
load's address with nothing in between (`bwprof kernels` and tests/gpu/test_ptx.py read the
PTX for it). A global-space pointer reaches this GPU's memory, a peer's with peer access on,
and pinned host memory under unified addressing, as `ld.global` does in CUDA C.

Numba's CUDA simulator runs kernels as Python, where an intrinsic cannot be called: there the
same name is a Python function that reads the 8 bytes at the address (a simulated device
array is host memory, so its addresses are real ones), but only inside an array registered
with `readable` (a test's chain and state): a wrong address raises `UnmappedAddress` (an
IndexError) instead of reading this process's memory wherever it points, which at an
unmapped address killed the whole test process. Which of the two `load_u64` is, is decided
once, at import, as the simulator itself is (NUMBA_ENABLE_CUDASIM, read when numba is first
imported); the intrinsic is numba-cuda's own (`numba.cuda.extending.intrinsic`: numba-cuda
is splitting its typing from numba core's), imported only off the simulator, where
`numba.cuda.extending` may not exist. Numba's `@overload` cannot serve both: its CUDA
implementation compiles as a device function for the current GPU's compute capability,
which needs a driver, so PTX could no longer be made without a GPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from numba import config

GLOBAL_ADDRESS_SPACE = 1
"""NVVM's address space of global memory: loads through it are `ld.global`, not generic."""
WORD_BYTES = 8


class UnmappedAddress(IndexError):
    """A simulated load from an address outside every array registered with `readable`."""


_READABLE: list[tuple[int, int]] = []
"""[start, end) of the arrays simulated loads may read, innermost `readable` last."""


def _extent(array: Any) -> tuple[int, int]:
    interface = (getattr(array, "__cuda_array_interface__", None)
                 or array.__array_interface__)
    start = int(interface["data"][0])
    return start, start + int(array.nbytes)


@contextmanager
def readable(*arrays: Any) -> Iterator[None]:
    """Let simulated loads read `arrays` (NumPy or simulated device arrays) in this block."""
    extents = [_extent(a) for a in arrays]
    _READABLE.extend(extents)
    try:
        yield
    finally:
        del _READABLE[len(_READABLE) - len(extents):]


def simulated_load_u64(address: Any) -> int:
    """The simulator's load: the 8 bytes at `address`, which must lie, 8-byte aligned, in an
    array registered with `readable`; UnmappedAddress otherwise."""
    at = int(address)
    if at % WORD_BYTES or not any(start <= at and at + WORD_BYTES <= end
                                  for start, end in _READABLE):
        raise UnmappedAddress(f"simulated load_u64 from {at:#x}: not an aligned word of any "
                              f"array registered with address.readable ({len(_READABLE)} "
                              "registered)")
    return int(ctypes.c_uint64.from_address(at).value)


def _global_load() -> Any:
    """The compiled load: numba-cuda's intrinsic, uint64 -> the uint64 at that global
    address (one ld.global.u64)."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    uint64: Any = types.uint64  # type: ignore[attr-defined]  # a star import's, unseen by mypy

    @intrinsic
    def ld_global_u64(typingctx: Any, address: Any) -> Any:  # pragma: no cover - compiled
        if address != uint64:
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            pointer = builder.inttoptr(args[0], ir.PointerType(
                ir.IntType(64), addrspace=GLOBAL_ADDRESS_SPACE))
            return builder.load(pointer)

        return uint64(uint64), codegen

    return ld_global_u64


load_u64: Any = simulated_load_u64 if getattr(config, "ENABLE_CUDASIM", 0) else _global_load()
"""What a kernel calls to load from a raw address (see the module's docstring)."""

