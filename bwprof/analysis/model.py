"""What the measured figures mean for a model: `bwprof report RUN_DIR --model 70e9:bf16`.

From the parameter count and dtype: the bytes of the weights; whether they fit in one GPU's
memory or how many GPUs they need; the time to stage them from host to GPU at the measured
host→device rate (one GPU, and all GPUs at once with the weights spread evenly over them);
the time of one full pass over the weights at the measured HBM rate, with the weights spread
over the GPUs they need (the floor of a memory-bound decode step); and, for a host-only run,
the same pass in host DDR. Each time is given at the measured figure and at the theoretical
peak. Weights only: activations, KV cache and framework overhead need memory on top.

The compute side, where the run measured a matrix multiply (`gemm_gpu`, else `gemm_host`):
the time of one training step's forward and backward matrix multiplies per token, at 6 x
PARAMETERS FLOP a token (2N forward, 4N backward: Kaplan et al. 2020, "Scaling Laws for
Neural Language Models", section 2.1, C = 6N per token; attention's context-dependent FLOP
left out), at the measured ceiling of the model's dtype (the slowest GPU's best size; fp32
also as tf32) and at its peak, beside the time to stream the weights from HBM: a step is
compute-bound when its tokens x 6N FLOP, spread over the GPUs the weights need, take longer
than that pass.

Which figures: the summary's rows. Where several GPUs give one, the slowest GPU's figure is
used (a sharded model waits for its slowest shard); `h2d_all` (device `all`) for all GPUs at
once; `hbm_triad` for HBM; the best `ddr_triad` for DDR. Arithmetic only, no hardware.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

import pandas as pd

from bwprof.analysis.figures import ratio
from bwprof.analysis.summary import is_numa_device
from bwprof.casespec import path_of
from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.schema.meta import RunMeta
from bwprof.store.formats import cell_float, row_at

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
}
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_SPEC = re.compile(r"\s*(\d+(?:\.\d*)?)([eE][+-]?\d+)?\s*([kKmMbBgGtT]?)\s*:\s*(\w+)\s*")
_USAGE = ("--model expects PARAMETERS:DTYPE, e.g. 70e9:bf16 or 8B:fp8 (suffixes K, M, B, T; "
          "dtypes: " + ", ".join(DTYPE_BYTES) + ")")
BARE_COUNT_MIN = 1000.0
"""A count without suffix or exponent below this is a model's size in billions written
without its B ('70:bf16'), not a model of 70 parameters: refused with the spelling."""


@dataclass(frozen=True)
class ModelSpec:
    parameters: float
    dtype: str

    @property
    def bytes_per_parameter(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> int:
        return math.ceil(self.parameters * self.bytes_per_parameter)


def parse_model(text: str) -> ModelSpec:
    """'70e9:bf16', '70B:bf16', '7000000000:int4' -> ModelSpec; anything else a one-line error,
    '70:bf16' too (70 parameters: the B left out)."""
    match = _SPEC.fullmatch(text)
    if not match:
        raise BwprofError(f"{_USAGE}, got {shorten(text)!r}")
    number, exponent, scale, dtype = match.groups()
    parameters = float(number + (exponent or "")) * _SCALE[scale.lower()]
    if dtype.lower() not in DTYPE_BYTES:
        raise BwprofError(f"unknown dtype {shorten(dtype)!r} in --model {shorten(text)!r}; "
                          f"{_USAGE}")
    if not exponent and not scale and 0 < parameters < BARE_COUNT_MIN:
        count = shorten(number)
        raise BwprofError(f"--model {shorten(text)!r} reads as {count} parameters; for "
                          f"{count} billion write {count}e9:{dtype.lower()} or "
                          f"{count}B:{dtype.lower()} (suffixes K, M, B, T)")
    if not math.isfinite(parameters * DTYPE_BYTES[dtype.lower()]):
        raise BwprofError(f"--model {shorten(text)!r}: the parameter count is too large: "
                          "its weights would not be a finite number of bytes")
    if parameters < 1:
        raise BwprofError(f"--model {shorten(text)!r}: the parameter count must be at least 1")
    return ModelSpec(parameters, dtype.lower())


@dataclass(frozen=True)
class Timing:
    """One time the model costs: at the measured rate and at the theoretical peak."""

    what: str
    case: str
    device: str
    backend: str
    bytes: int
    gbps: float | None
    seconds: float | None
    peak_gbps: float | None
    peak_seconds: float | None


TRAINING_FLOP_PER_PARAMETER = 6.0
"""FLOP per parameter per token of one forward and backward pass (Kaplan et al. 2020)."""
GEMM_DTYPES_FOR: dict[str, tuple[str, ...]] = {
    "fp32": ("fp32", "tf32"), "fp16": ("fp16",), "bf16": ("bf16",),
}
"""The gemm dtypes a model dtype's matrix multiplies run in (fp8, int8, int4: none measured)."""


@dataclass(frozen=True)
class ComputeTiming:
    """One token's forward and backward matrix multiplies at a measured ceiling."""

    what: str
    case: str
    device: str
    backend: str
    dtype: str
    flop: float
    tflops: float
    seconds: float
    peak_tflops: float | None
    peak_seconds: float | None
    tokens_to_match_weights: float | None
    """Tokens a step must hold for its matrix multiplies to take as long as one pass over the
    weights in HBM: the batch where training turns from memory- to compute-bound."""


@dataclass(frozen=True)
class ModelReport:
    parameters: float
    dtype: str
    bytes_per_parameter: float
    weight_bytes: int
    gpus_in_run: int
    gpu_name: str | None
    gpu_memory_bytes: int | None
    """Memory of the smallest GPU in the run."""
    fits_one_gpu: bool | None
    gpus_needed: int | None
    timings: list[Timing] = field(default_factory=list)
    compute: list[ComputeTiming] = field(default_factory=list)
    """Forward and backward matrix multiplies per token at the measured compute ceiling."""
    missing: list[str] = field(default_factory=list)
    """'what: why' for each time this run has no figure for (a GPU time only with GPUs)."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _seconds(nbytes: float, gbps: float | None) -> float | None:
    """None ("?") for no rate, and for a rate of 0 or 5e-324 GB/s (a damaged row): not inf."""
    return ratio(nbytes, gbps * 1e9) if gbps is not None else None


_num = cell_float


def _timing(what: str, row: pd.Series | None, nbytes: float) -> Timing | None:
    if row is None:
        return None
    gbps, peak = _num(row["gbps"]), _num(row["peak_gbps"])
    return Timing(what, str(row["case"]), str(row["device"]), str(row["backend"]),
                  math.ceil(nbytes), gbps, _seconds(nbytes, gbps), peak, _seconds(nbytes, peak))


def _slowest(summary: pd.DataFrame, case: str, device_all: bool = False) -> pd.Series | None:
    rows = summary[(summary["case"] == case) & summary["gbps"].notna()
                   & ~summary["device"].map(is_numa_device)]  # a host is all its NUMA nodes
    every_gpu = rows["device"].astype(str).str.fullmatch(r"(.+:)?all")  # a fleet's 'node7:all'
    rows = rows[every_gpu] if device_all else rows[~every_gpu]
    return None if rows.empty else row_at(rows, rows["gbps"].idxmin())


def _why_none(summary: pd.DataFrame, case: str) -> str:
    """Why the summary has no figure for `case`: its own row's status and note."""
    rows = summary[summary["case"] == case]
    if rows.empty or rows.iloc[0]["status"] == "absent":
        return f"no {case} figure in this run"
    row = rows.iloc[0]
    return f"{row['status']}: {row['note']}" if row["note"] else str(row["status"])


def _compute_timings(spec: ModelSpec, results: pd.DataFrame | None,
                     hbm_seconds: float | None,
                     gpus: int = 1) -> tuple[list[ComputeTiming], list[str]]:
    """Per token at each measured ceiling of the model's dtype: the slowest device's best
    gemm_gpu size (a sharded step waits for its slowest GPU), else gemm_host's best. The
    weights' pass (`hbm_seconds`) is each of the `gpus` GPUs streaming its share; a token's
    matrix multiplies spread over the same GPUs, so it takes `gpus` x as many tokens for
    them to outlast that pass as on one GPU."""
    flop = TRAINING_FLOP_PER_PARAMETER * spec.parameters
    dtypes = GEMM_DTYPES_FOR.get(spec.dtype, ())
    if results is None or "dtype" not in results.columns:
        return [], []
    ok = results[(results["status"] == "ok") & results["value_best"].notna()
                 & (results["metric"] == "throughput")]
    found, missing = [], []
    for case in ("gemm_gpu", "gemm_host"):
        mine = ok[ok["case"] == case]
        if mine.empty:
            continue
        if not dtypes or not mine["dtype"].isin(dtypes).any():
            have = ", ".join(sorted(set(mine["dtype"].dropna())))
            missing.append(f"{spec.dtype} matrix multiplies: {case} measured {have} only")
            continue
        for dtype in dtypes:
            rows = mine[mine["dtype"] == dtype]
            if rows.empty:
                continue
            best = rows.loc[rows.groupby("device")["value_best"].idxmax()]
            row = best.loc[best["value_best"].astype(float).idxmin()]
            tflops = float(row["value_best"])
            peak = _num(row["peak_value"])
            seconds = ratio(flop, tflops * 1e12)
            if seconds is None:  # a ceiling of 0 or 5e-324 TFLOP/s (a damaged row): no time
                continue
            found.append(ComputeTiming(
                f"forward + backward matmuls, one token ({dtype})", case, str(row["device"]),
                str(row["backend"]), dtype, flop, tflops, seconds, peak,
                ratio(flop, peak * 1e12) if peak is not None else None,
                ratio(gpus * hbm_seconds, seconds) if hbm_seconds and case == "gemm_gpu"
                else None))
        break  # the GPU's figure where there is one; the host's only without
    return found, missing


def model_report(spec: ModelSpec, summary: pd.DataFrame, meta: RunMeta,
                 results: pd.DataFrame | None = None) -> ModelReport:
    """The model's arithmetic against one run's summary and metadata (and its results, for
    the compute side)."""
    weights = spec.weight_bytes
    gpus = meta.gpus.devices
    memories = [d.properties.total_memory_bytes for d in gpus
                if d.properties.total_memory_bytes]
    memory = min(memories) if memories else None
    needed = math.ceil(weights / memory) if memory else None
    names = list(dict.fromkeys(d.name for d in gpus))
    h2d, h2d_all = path_of("h2d").headline, path_of("h2d").aggregate
    hbm_case, ddr_case = path_of("hbm").headline, path_of("ddr").headline
    wanted = [  # (what, case, row, bytes, whether a run without it should say why)
        ("stage host→GPU, one GPU", h2d, _slowest(summary, h2d), weights, bool(gpus)),
        (f"stage host→GPU, all {len(gpus)} GPUs at once", h2d_all,
         _slowest(summary, h2d_all, device_all=True), weights, len(gpus) > 1),
        (f"one pass over the weights in HBM, on {needed or 1} GPU(s)", hbm_case,
         _slowest(summary, hbm_case), weights / (needed or 1), bool(gpus)),
        ("one pass over the weights in host DDR", ddr_case, _slowest(summary, ddr_case),
         weights, True),
    ]
    timings = [_timing(what, row, nbytes) for what, _case, row, nbytes, _ in wanted]
    missing = [f"{what}: {_why_none(summary, case)}"
               for what, case, row, _, expected in wanted if row is None and expected]
    hbm = timings[2]
    compute, why = _compute_timings(spec, results, hbm.seconds if hbm is not None else None,
                                    needed or 1)
    missing += why
    return ModelReport(
        parameters=spec.parameters, dtype=spec.dtype,
        bytes_per_parameter=spec.bytes_per_parameter, weight_bytes=weights,
        gpus_in_run=len(gpus), gpu_name=", ".join(names) if names else None,
        gpu_memory_bytes=memory, fits_one_gpu=None if memory is None else weights <= memory,
        gpus_needed=needed, timings=[t for t in timings if t is not None], compute=compute,
        missing=missing,
    )


def _duration(seconds: float | None) -> str:
    """A time at a precision that never shows a non-zero time as 0: three figures from µs
    down to ns, '< 1 ns' below."""
    if seconds is None:
        return "?"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    for scale, unit in ((1e-6, "µs"), (1e-9, "ns")):
        if seconds >= scale:
            value = seconds / scale
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return "0 s" if seconds == 0 else "< 1 ns"


def _weight(nbytes: int) -> str:
    """Weights in GB to two decimals, or in MB, kB or bytes below a GB (never 0.00 GB)."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def _params(parameters: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if parameters >= scale:
            return f"{parameters / scale:g}{suffix}"
    return f"{parameters:g}"


def model_lines(report: ModelReport) -> list[str]:
    """The model section as plain text lines; simulated figures are never printed."""
    lines = [
        f"model: {_params(report.parameters)} parameters × {report.dtype} "
        f"({report.bytes_per_parameter:g} byte(s) each) = {_weight(report.weight_bytes)} "
        "of weights (weights only: KV cache and activations need more)",
    ]
    if report.gpu_memory_bytes is None:
        lines.append("GPU memory: no GPU in this run, so no fit and no GPU timings")
    else:
        memory = f"{report.gpu_memory_bytes / 1e9:.1f} GB per GPU ({report.gpu_name})"
        if report.fits_one_gpu:
            lines.append(f"GPU memory: {memory}: fits on one GPU")
        else:
            short = ("" if (report.gpus_needed or 0) <= report.gpus_in_run
                     else f"; this run has only {report.gpus_in_run}")
            lines.append(f"GPU memory: {memory}: needs {report.gpus_needed} GPUs{short}")
    width = max((len(t.what) for t in report.timings), default=0)
    if report.timings:
        lines.append(f"{'':<{width}}  {'at the measured rate':>30}  {'at the peak':>24}")
    for t in report.timings:
        if t.backend == "simulated":
            measured = "simulated (not a measurement)"
        else:
            measured = f"{_duration(t.seconds)} ({t.gbps:.1f} GB/s)" if t.gbps else "?"
        peak = f"{_duration(t.peak_seconds)} ({t.peak_gbps:.1f} GB/s)" if t.peak_gbps else "?"
        where = f"{t.case} {t.device}"
        lines.append(f"{t.what:<{width}}  {measured:>30}  {peak:>24}  [{where}]")
    for c in report.compute:
        measured = ("simulated (not a measurement)" if c.backend == "simulated"
                    else f"{_duration(c.seconds)} ({c.tflops:.3g} TFLOP/s)")
        peak = (f"{_duration(c.peak_seconds)} ({c.peak_tflops:.0f} TFLOP/s)"
                if c.peak_tflops else "?")
        lines.append(f"{c.what} = 6 x {_params(report.parameters)} = {c.flop / 1e12:.3g} "
                     f"TFLOP: {measured:>30}  {peak:>24}  [{c.case} {c.device}]")
        if c.tokens_to_match_weights and c.backend != "simulated":
            tokens = c.tokens_to_match_weights
            start = (f"from ~{tokens:,.0f} tokens" if tokens >= 1.5 else "from its first token")
            lines.append(f"  a step is compute-bound {start} ({c.dtype}, spread over the "
                         f"{report.gpus_needed or 1} GPU(s) the weights need): their matmuls "
                         "outlast one pass over the weights in HBM (6N FLOP/token, Kaplan et "
                         "al. 2020)")
    lines += [f"no time for {line}" for line in report.missing]
    return lines
