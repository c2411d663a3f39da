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
array is host memory, so its addresses are real ones). Which of the two `load_u64` is, is
decided once, at import, as the simulator itself is (NUMBA_ENABLE_CUDASIM, read when numba is
first imported). Numba's `@overload` cannot serve both: its CUDA implementation compiles as a
device function for the current GPU's compute capability, which needs a driver, so PTX could
no longer be made without a GPU.
"""

from __future__ import annotations

import ctypes
from typing import Any

from llvmlite import ir
from numba import config, types
from numba.core.extending import intrinsic

GLOBAL_ADDRESS_SPACE = 1
"""NVVM's address space of global memory: loads through it are `ld.global`, not generic."""


@intrinsic
def ld_global_u64(typingctx: Any, address: Any) -> Any:  # pragma: no cover - compiled
    """uint64 -> the uint64 stored at that global address (one ld.global.u64)."""
    if address != types.uint64:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = builder.inttoptr(args[0], ir.PointerType(ir.IntType(64),
                                                           addrspace=GLOBAL_ADDRESS_SPACE))
        return builder.load(pointer)

    return types.uint64(types.uint64), codegen


def simulated_load_u64(address: Any) -> int:
    """The simulator's load: the 8 bytes at `address` of this process's memory."""
    return int(ctypes.c_uint64.from_address(int(address)).value)


load_u64: Any = simulated_load_u64 if getattr(config, "ENABLE_CUDASIM", 0) else ld_global_u64
"""What a kernel calls to load from a raw address (see the module's docstring)."""

