"""What the measured figures mean for a model: `bwprof report RUN_DIR --model 70e9:bf16`.

From the parameter count and dtype: the bytes of the weights; whether they fit in one GPU's
memory or how many GPUs they need; the time to stage them from host to GPU at the measured
host→device rate (one GPU, and all GPUs at once with the weights spread evenly over them);
the time of one full pass over the weights at the measured HBM rate, with the weights spread
over the GPUs they need (the floor of a memory-bound decode step); and, for a host-only run,
the same pass in host DDR. Each time is given at the measured figure and at the theoretical
peak. Weights only: activations, KV cache and framework overhead need memory on top.

Which figures: the summary's rows. Where several GPUs give one, the slowest GPU's figure is
used (a sharded model waits for its slowest shard); `h2d_all` (device `all`) for all GPUs at
once; `hbm_triad` for HBM; the best `ddr_triad` for DDR. Arithmetic only, no hardware.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

import pandas as pd

from bwprof.coerce import shorten
from bwprof.errors import BwprofError
from bwprof.report.formats import cell_float, row_at
from bwprof.report.summary import is_numa_device
from bwprof.schema.meta import RunMeta

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
}
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_SPEC = re.compile(r"\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([kKmMbBgGtT]?)\s*:\s*(\w+)\s*")
_USAGE = ("--model expects PARAMETERS:DTYPE, e.g. 70e9:bf16 or 8B:fp8 (dtypes: "
          + ", ".join(DTYPE_BYTES) + ")")


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
    """'70e9:bf16', '70B:bf16', '7000000000:int4' -> ModelSpec; anything else a one-line error."""
    match = _SPEC.fullmatch(text)
    if not match:
        raise BwprofError(f"{_USAGE}, got {shorten(text)!r}")
    number, scale, dtype = match.groups()
    parameters = float(number) * _SCALE[scale.lower()]
    if dtype.lower() not in DTYPE_BYTES:
        raise BwprofError(f"unknown dtype {shorten(dtype)!r} in --model {shorten(text)!r}; "
                          f"{_USAGE}")
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
    missing: list[str] = field(default_factory=list)
    """'what: why' for each time this run has no figure for (a GPU time only with GPUs)."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _seconds(nbytes: float, gbps: float | None) -> float | None:
    return nbytes / (gbps * 1e9) if gbps else None


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


def model_report(spec: ModelSpec, summary: pd.DataFrame, meta: RunMeta) -> ModelReport:
    """The model's arithmetic against one run's summary and metadata."""
    weights = spec.weight_bytes
    gpus = meta.gpus.devices
    memories = [d.properties.total_memory_bytes for d in gpus
                if d.properties.total_memory_bytes]
    memory = min(memories) if memories else None
    needed = math.ceil(weights / memory) if memory else None
    names = list(dict.fromkeys(d.name for d in gpus))
    wanted = [  # (what, case, row, bytes, whether a run without it should say why)
        ("stage host→GPU, one GPU", "h2d_pinned", _slowest(summary, "h2d_pinned"), weights,
         bool(gpus)),
        (f"stage host→GPU, all {len(gpus)} GPUs at once", "h2d_all",
         _slowest(summary, "h2d_all", device_all=True), weights, len(gpus) > 1),
        (f"one pass over the weights in HBM, on {needed or 1} GPU(s)", "hbm_triad",
         _slowest(summary, "hbm_triad"), weights / (needed or 1), bool(gpus)),
        ("one pass over the weights in host DDR", "ddr_triad", _slowest(summary, "ddr_triad"),
         weights, True),
    ]
    timings = [_timing(what, row, nbytes) for what, _case, row, nbytes, _ in wanted]
    missing = [f"{what}: {_why_none(summary, case)}"
               for what, case, row, _, expected in wanted if row is None and expected]
    return ModelReport(
        parameters=spec.parameters, dtype=spec.dtype,
        bytes_per_parameter=spec.bytes_per_parameter, weight_bytes=weights,
        gpus_in_run=len(gpus), gpu_name=", ".join(names) if names else None,
        gpu_memory_bytes=memory, fits_one_gpu=None if memory is None else weights <= memory,
        gpus_needed=needed, timings=[t for t in timings if t is not None], missing=missing,
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def _params(parameters: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if parameters >= scale:
            return f"{parameters / scale:g}{suffix}"
    return f"{parameters:g}"


def model_lines(report: ModelReport) -> list[str]:
    """The model section as plain text lines; simulated figures are never printed."""
    lines = [
        f"model: {_params(report.parameters)} parameters × {report.dtype} "
        f"({report.bytes_per_parameter:g} byte(s) each) = {report.weight_bytes / 1e9:.2f} GB "
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
    lines += [f"no time for {line}" for line in report.missing]
    return lines
