"""Host matrix multiply (`gemm_host`): NumPy's BLAS on square matrices, fp64 and fp32, with
every selected thread and with one.

One sample is one `numpy.matmul(a, b, out=c)` of n x n matrices between two reads of the
monotonic clock (`time.perf_counter`), after an untimed warm-up multiply (BLAS thread start,
first touch of `c`); FLOP = 2 n^3 per multiply. The BLAS thread count is set around the job
through threadpoolctl where it is installed, else through OpenBLAS's own
`openblas_set_num_threads` found among the loaded libraries; where neither is available the
one-thread row is skipped with that reason. After timing, a sub-block of the product is
checked against the same sub-block computed in fp64 from the inputs by a plain loop of dot
products (not BLAS's GEMM), with a tolerance set by the dtype: a wrong or skipped multiply is
`invalid`.

This module imports no Numba (the catalogue imports it).
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bwprof import costs
from bwprof.costs import Cost
from bwprof.measurement import Job, Measurement, NotRun

if TYPE_CHECKING:
    from bwprof.host.cases import HostCase, HostCaseRun
    from bwprof.host.facts import HostFacts
    from bwprof.plan import Plan

DTYPES: dict[str, type[np.floating]] = {"fp64": np.float64, "fp32": np.float32}
SIZES: dict[str, tuple[int, ...]] = {"quick": (512,), "standard": (1024,),
                                     "full": (512, 1024, 2048, 4096)}
"""Matrix order n by preset: standard's 1024 is 2.1 GFLOP a multiply (tens of ms on two cores),
so the default run stays short; `full` sweeps on to where a many-core host plateaus."""
CHECK_BLOCK = 16
"""Rows and columns of the product checked against the fp64 reference."""
TOLERANCE: dict[str, float] = {"fp64": 1e-10, "fp32": 1e-4, "tf32": 1e-2, "fp16": 1e-2,
                               "bf16": 4e-2}
"""Largest error allowed, relative to the root mean square of the reference block, by dtype:
well above each format's rounding of the product (the inputs are the stored values, so their
own rounding is not in the error; TF32 rounds them again, to 10 mantissa bits), far below what
a wrong or skipped multiply gives (an error of the order of the values themselves)."""


def flop(n: int) -> float:
    """FLOP of one n x n by n x n multiply: n^2 dot products of n multiply-adds."""
    return 2.0 * float(n) ** 3


def inputs(n: int, dtype: type[np.floating] | np.dtype, seed: int = 23) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """Two n x n matrices of uniform values in [-1, 1)."""
    rng = np.random.default_rng(seed + n)
    a = rng.uniform(-1.0, 1.0, (n, n)).astype(dtype)
    b = rng.uniform(-1.0, 1.0, (n, n)).astype(dtype)
    return a, b


def corners(n: int, block: int = CHECK_BLOCK) -> tuple[slice, slice]:
    """The rows (and columns) of the two checked corner blocks: top-left, bottom-right."""
    k = min(block, n)
    return slice(0, k), slice(n - k, n)


def check_product(a: np.ndarray, b: np.ndarray, blocks: list[tuple[slice, np.ndarray]],
                  dtype: str) -> str:
    """'' where each block of the product (rows = columns = the slice, its values `got`)
    matches a @ b computed in fp64 one dot product at a time (not through a GEMM); else what
    is wrong. `a` and `b` are the inputs as stored, any float dtype."""
    problems = []
    for rows, got in blocks:
        a64 = np.asarray(a[rows, :], dtype=np.float64)
        b64 = np.asarray(b[:, rows], dtype=np.float64)
        expected = np.array([[float(np.dot(a64[i], b64[:, j])) for j in range(b64.shape[1])]
                             for i in range(a64.shape[0])])
        values = np.asarray(got, dtype=np.float64)
        if values.shape != expected.shape or not np.all(np.isfinite(values)):
            problems.append("non-finite values in the product" if values.shape == expected.shape
                            else f"product block of shape {values.shape}")
            continue
        rms = float(np.sqrt(np.mean(expected**2))) or 1.0
        error = float(np.max(np.abs(values - expected))) / rms
        if error > TOLERANCE[dtype]:
            problems.append(f"product rows {rows.start}-{rows.stop - 1} off by {error:.2e} of "
                            f"its RMS (tolerance {TOLERANCE[dtype]:.0e} for {dtype})")
    return "; ".join(problems)


def check_block(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: str) -> str:
    """check_product on the two corner blocks of a whole product `c`."""
    return check_product(a, b, [(rows, c[rows, rows]) for rows in corners(a.shape[0])], dtype)


# -- BLAS threads -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BlasInfo:
    """The BLAS NumPy calls, as it reports itself."""

    library: str
    version: str
    threading: str
    threads: int | None
    control: str
    """How bwprof sets its thread count: `threadpoolctl`, `openblas` (its own call), or ''."""

    def describe(self) -> str:
        parts = [self.library or "unknown BLAS"]
        if self.version:
            parts.append(self.version)
        if self.threading:
            parts.append(f"{self.threading} threading")
        if self.threads:
            parts.append(f"{self.threads} thread(s) by default")
        parts.append(f"threads set through {self.control}" if self.control
                     else "thread count not settable (threadpoolctl not installed, no "
                          "OpenBLAS control found)")
        return ", ".join(parts)


def _numpy_blas() -> tuple[str, str, str]:
    """NumPy's build record of its BLAS: name, version, configuration line."""
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return (str(blas.get("name", "")), str(blas.get("version", "")),
                str(blas.get("openblas configuration", "")))
    except Exception:  # an older NumPy without mode="dicts"
        return "", "", ""


def _openblas_library() -> ctypes.CDLL | None:
    """The loaded OpenBLAS (NumPy's wheel bundles scipy-openblas), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split()[-1] if line.strip() else ""
        if "openblas" in path.lower() and ".so" in path:
            with contextlib.suppress(OSError):
                return ctypes.CDLL(path)
    return None


_OPENBLAS_PREFIXES = ("scipy_openblas", "openblas")
_OPENBLAS_SUFFIXES = ("64_", "")


def _openblas_call(library: ctypes.CDLL, name: str) -> object | None:
    for prefix in _OPENBLAS_PREFIXES:
        for suffix in _OPENBLAS_SUFFIXES:
            function = getattr(library, f"{prefix}_{name}{suffix}", None)
            if function is not None:
                return function
    return None


class BlasThreads:
    """Reads and sets NumPy's BLAS thread count."""

    def __init__(self) -> None:
        np.ones((2, 2)) @ np.ones((2, 2))  # the BLAS is loaded by its first call
        self._pool = None
        self._openblas = None
        name, version, config = _numpy_blas()
        threading, threads, control = "", None, ""
        try:
            import threadpoolctl  # type: ignore[import-not-found, unused-ignore]

            self._pool = threadpoolctl.ThreadpoolController()
            blas = [lib for lib in self._pool.info() if lib.get("user_api") == "blas"]
            if blas:
                name = name or str(blas[0].get("internal_api", ""))
                version = str(blas[0].get("version") or version)
                threading = str(blas[0].get("threading_layer", ""))
                threads = int(blas[0].get("num_threads") or 0) or None
                control = "threadpoolctl"
        except ImportError:
            library = _openblas_library()
            if library is not None:
                get = _openblas_call(library, "get_num_threads")
                setter = _openblas_call(library, "set_num_threads")
                parallel = _openblas_call(library, "get_parallel")
                if get is not None and setter is not None:
                    self._openblas = (get, setter)
                    threads = int(get())  # type: ignore[operator]
                    control = "openblas_set_num_threads (threadpoolctl not installed)"
                if parallel is not None:
                    threading = {0: "sequential", 1: "pthreads", 2: "openmp"}.get(
                        int(parallel()), "")  # type: ignore[operator]
        if not threading and "openblas" in config.lower():
            threading = "OpenBLAS"
        self.info = BlasInfo(name, version, threading, threads, control)

    @contextlib.contextmanager
    def limited(self, threads: int) -> Iterator[bool]:
        """BLAS limited to `threads` inside; yields whether the limit could be set."""
        if self._pool is not None:
            with self._pool.limit(limits=threads, user_api="blas"):
                yield True
            return
        if self._openblas is not None:
            get, setter = self._openblas
            before = int(get())  # type: ignore[operator]
            setter(ctypes.c_int(threads))  # type: ignore[operator]
            try:
                yield True
            finally:
                setter(ctypes.c_int(before))  # type: ignore[operator]
            return
        yield False


# -- the case ---------------------------------------------------------------------------------


def sizes(plan: Plan) -> tuple[int, ...]:
    return SIZES.get(plan.preset, SIZES["standard"])


def jobs(case: HostCase, host: HostFacts, plan: Plan) -> list[Job]:
    """Each size and dtype with every selected thread, then with one."""
    counts = sorted({max(plan.threads), 1}, reverse=True)
    return [Job(case.key, size_bytes=n * n * np.dtype(DTYPES[dtype]).itemsize, threads=t,
                dtype=dtype)
            for n in sizes(plan) for dtype in DTYPES for t in counts]


def cost(job: Job, plan: Plan, host: HostFacts, previous: Job | None) -> Cost:
    """A warm-up and `repeats` multiplies at the assumed FLOP rate (fp32 twice fp64's), the
    inputs drawn and the corners checked; three matrices held."""
    n, threads = order(job), job.threads or 1
    rate = costs.HOST_GFLOPS_PER_THREAD * 1e9 * threads * (2 if job.dtype == "fp32" else 1)
    inputs_s = 2 * n * n * 1e-8  # NumPy's random draw and the cast, about 10 ns an element
    return Cost(costs.HOST_JOB_S + inputs_s + (plan.repeats + 1) * flop(n) / rate,
                host_bytes=3 * (job.size_bytes or 0))


def order(job: Job) -> int:
    """The matrix order n of a job (its size is one matrix's bytes)."""
    assert job.size_bytes is not None and job.dtype is not None
    return round((job.size_bytes / np.dtype(DTYPES[job.dtype]).itemsize) ** 0.5)


def time_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray, repeats: int,
                warmup: int = 1) -> list[float]:
    """Seconds of each of `repeats` `matmul(a, b, out=c)`, after `warmup` untimed ones: the
    timing `gemm_host` uses. Its yardstick (benchmarks/gemm_host_vs_numpy.py) repeats these
    lines in a bare child that never imports bwprof, so the reference cannot share a fault."""
    for _ in range(warmup):
        np.matmul(a, b, out=c)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b, out=c)
        samples.append(time.perf_counter() - start)
    return samples


def matmul(run: HostCaseRun) -> list[Measurement]:
    job = run.job
    assert job.dtype is not None and job.threads is not None
    blas = run.scratch.get("blas")
    if not isinstance(blas, BlasThreads):
        blas = BlasThreads()
        run.scratch["blas"] = blas
    n, dtype = order(job), job.dtype
    a, b = inputs(n, DTYPES[dtype])
    c = np.empty_like(a)
    with blas.limited(job.threads) as limited:
        if not limited and job.threads != blas.info.threads:
            raise NotRun("skipped", f"cannot set the BLAS to {job.threads} thread(s): "
                                    f"{blas.info.describe()}")
        samples = time_matmul(a, b, c, run.plan.repeats)
    problem = check_block(a, b, c, dtype)
    notes = [f"validation failed: {problem}" if problem else "",
             f"numpy.matmul {n}x{n} {dtype}, {job.threads} BLAS thread(s), one multiply a "
             "sample after a warm-up, monotonic clock",
             f"BLAS: {blas.info.describe()}", job.note]
    return [Measurement(
        seconds_per_op=tuple(samples), bytes_per_op=3 * a.nbytes, size_bytes=a.nbytes,
        device="cpu", device_name=run.host.cpu_model, direction=run.case.direction,
        memory=run.case.memory, valid=not problem, note="; ".join(x for x in notes if x),
        threads=job.threads, work_per_op=flop(n), dtype=dtype,
        extra={"blas": blas.info.describe()},
    )]
