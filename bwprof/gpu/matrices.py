"""The matrix dtypes of `gemm_gpu` as host arrays: how each is stored, encoded for the device
and decoded for the check. Shared by the case, the CUDA backend and the simulated one; imports
neither CuPy nor Numba.

bf16 has no NumPy dtype: it is stored as uint16, the top half of a float32 rounded to nearest
even (what `__float2bfloat16_rn` does on the device).
"""

from __future__ import annotations

import numpy as np

STORAGE: dict[str, np.dtype] = {
    "fp64": np.dtype(np.float64), "fp32": np.dtype(np.float32), "tf32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16), "bf16": np.dtype(np.uint16),
}
MIN_COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "fp64": (0, 0), "fp32": (0, 0), "tf32": (8, 0), "fp16": (5, 3), "bf16": (8, 0),
}
"""Below this a dtype's GEMM is not supported (tf32 and bf16 tensor cores from Ampere)."""


def itemsize(dtype: str) -> int:
    return STORAGE[dtype].itemsize


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bf16, as uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32)
            << np.uint32(16)).view(np.float32)


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """Host values (any float) in the dtype's storage."""
    if dtype == "bf16":
        return to_bf16(np.asarray(values, dtype=np.float32))
    return np.asarray(values).astype(STORAGE[dtype])


def decode(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values (or raw bytes of them) as float32 or float64, for arithmetic."""
    typed = np.asarray(stored)
    if typed.dtype == np.uint8:
        typed = typed.view(STORAGE[dtype])
    if dtype == "bf16":
        return from_bf16(typed)
    return typed.astype(np.float64 if dtype == "fp64" else np.float32)


def inputs(n: int, dtype: str, seed: int = 23) -> tuple[np.ndarray, np.ndarray]:
    """Two n x n matrices of uniform values in [-1, 1) in the dtype's storage (an fp16 sum of
    n of their products, ~sqrt(n/9), stays far below its 65504 limit)."""
    rng = np.random.default_rng(seed + n)
    draw = np.float64 if dtype == "fp64" else np.float32
    a = rng.uniform(-1.0, 1.0, (n, n)).astype(draw)
    b = rng.uniform(-1.0, 1.0, (n, n)).astype(draw)
    return encode(a, dtype), encode(b, dtype)
