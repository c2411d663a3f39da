"""gemm_gpu and fma_gpu on the simulated backend through the real executor and runner, the
bf16 encoding, the compute peaks and the roofline's ceilings and sentences."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from bwprof.analysis.roofline import (
    bandwidth_ceilings,
    ceilings,
    compute_ceilings,
    roofline_lines,
)
from bwprof.gpu import layout, matrices
from bwprof.gpu.devices import describe
from bwprof.gpu.executor import GpuExecutor
from bwprof.gpu.kernel_params import FMA_ITERATIONS, FMA_UNROLL, fma_gold
from bwprof.gpu.sim import SimBackend
from bwprof.peaks import compute_peak_tflops
from bwprof.plan import make_plan
from bwprof.render.rooflineplot import roofline_figure
from bwprof.runner import RunContext, Runner


def _run(cases):
    plan = make_plan(cases=cases, preset="quick", repeats=2, usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=8 << 30)
    backend = SimBackend(devices=1)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    try:
        return runner.run()
    finally:
        runner.close()


@pytest.fixture(scope="module")
def compute_rows():
    return _run("gemm_gpu,fma_gpu")


def test_gemm_gpu_runs_every_dtype_validated_and_simulated(compute_rows):
    gemm = [r for r in compute_rows if r.case == "gemm_gpu"]
    assert {r.dtype for r in gemm} == set(layout.GEMM_DTYPES)
    assert all(r.status == "ok" for r in gemm), [r.note for r in gemm if r.status != "ok"]
    assert all(r.backend == "simulated" and r.unit == "TFLOP/s" for r in gemm)
    orders = {round((r.size_bytes / matrices.itemsize(r.dtype)) ** 0.5) for r in gemm}
    assert orders == {256, 1024}  # 4096 does not fit the simulated 64 MiB
    assert all("l2_resident" not in r.flags for r in gemm)


def test_fma_gpu_runs_fp32_and_fp64(compute_rows):
    fma = [r for r in compute_rows if r.case == "fma_gpu"]
    assert sorted(r.dtype for r in fma) == ["fp32", "fp64"]
    assert all(r.status == "ok" and r.work_per_op > 0 for r in fma)


def test_a_skipped_multiply_is_invalid(monkeypatch):
    monkeypatch.setattr(SimBackend, "gemm", lambda self, *args: None)
    rows = _run("gemm_gpu")
    assert rows and all(r.status == "invalid" for r in rows)
    assert all("validation failed" in r.note for r in rows)


class Knee(SimBackend):
    """A simulated GPU whose multiply runs at 1 TFLOP/s x min(n, knee) / knee: its figure
    rises with the order until `knee`, then holds (the timing model of the plateau tests)."""

    def __init__(self, knee: int, **kwargs) -> None:
        super().__init__(devices=1, op_seconds=self._seconds, **kwargs)
        self.knee, self.n = knee, 0

    def gemm(self, stream, dtype, n, a, b, c) -> None:
        self.n = n
        super().gemm(stream, dtype, n, a, b, c)

    def _seconds(self, work) -> float:
        return 2 * self.n ** 3 / (1e12 * min(self.n, self.knee) / self.knee)


def _swept(monkeypatch, backend):
    monkeypatch.setitem(layout.GEMM_SIZES, "quick", (32, 64, 128, 256))
    plan = make_plan(cases="gemm_gpu", preset="quick", repeats=2, usable_cpus=2,
                     llc_bytes=None, memory_available_bytes=8 << 30)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    try:
        rows = runner.run()
    finally:
        runner.close()
    orders: dict[str, list[int]] = {}
    for r in rows:
        orders.setdefault(r.dtype, []).append(round((r.size_bytes / matrices.itemsize(r.dtype))
                                                    ** 0.5))
    return rows, orders


def test_the_gemm_sweep_stops_where_the_figure_plateaus(monkeypatch):
    """Rising to n = 64 and flat after: 128 reads as 64 did, so 256 is never run, and the
    128 row says why the sweep stopped there."""
    rows, orders = _swept(monkeypatch, Knee(64))
    assert orders == {dtype: [32, 64, 128] for dtype in layout.GEMM_DTYPES}
    assert all(r.status == "ok" for r in rows)
    by_order = {(r.dtype, round((r.size_bytes / matrices.itemsize(r.dtype)) ** 0.5)): r
                for r in rows}
    assert "median +100.0% over n = 32: not plateaued yet" in by_order[("fp32", 64)].note
    assert ("median +0.0% over n = 64, under 3%: the figure has plateaued, so the sweep "
            "stops here") in by_order[("fp32", 128)].note
    assert "median" not in by_order[("fp32", 32)].note  # nothing to hold it against


def test_a_gemm_sweep_that_keeps_rising_runs_every_size_and_says_so(monkeypatch):
    rows, orders = _swept(monkeypatch, Knee(1 << 20))
    assert orders == {dtype: [32, 64, 128, 256] for dtype in layout.GEMM_DTYPES}
    last = [r for r in rows if r.size_bytes == 256 * 256 * matrices.itemsize(r.dtype)]
    assert all("median +100.0% over n = 128: not plateaued yet" in r.note for r in last)


def test_invalid_multiplies_never_make_a_plateau(monkeypatch):
    """Wrong products time alike at every size; they are no figure, so they stop nothing."""
    monkeypatch.setattr(Knee, "gemm", lambda self, *args: setattr(self, "n", args[2]))
    rows, orders = _swept(monkeypatch, Knee(1))
    assert orders == {dtype: [32, 64, 128, 256] for dtype in layout.GEMM_DTYPES}
    assert all(r.status == "invalid" and "median" not in r.note for r in rows)


def test_bf16_rounds_to_nearest_even():
    values = np.array([1.0, -2.5, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-9], dtype=np.float32)
    back = matrices.from_bf16(matrices.to_bf16(values))
    assert list(back) == [1.0, -2.5, 1.0, 1.0 + 2.0**-7]


def test_fma_gold_is_the_exact_sum():
    steps = FMA_ITERATIONS * FMA_UNROLL  # the kernels' iterations count unrolled trips
    assert fma_gold(FMA_ITERATIONS) == pytest.approx(8 + 28 / 16 + 8 * steps * 2**-20)


def test_h200_peaks_match_the_datasheet_at_its_clocks():
    # H100/H200 SXM: 132 SMs; tensor figures at 1830 MHz, CUDA-core ones at 1980 MHz
    assert compute_peak_tflops((9, 0), 132, 1830, "bf16") == pytest.approx(989.4, rel=1e-3)
    assert compute_peak_tflops((9, 0), 132, 1830, "tf32") == pytest.approx(494.7, rel=1e-3)
    assert compute_peak_tflops((9, 0), 132, 1980, "fp64_tensor") == pytest.approx(66.9, rel=1e-2)
    assert compute_peak_tflops((9, 0), 132, 1980, "fp32") == pytest.approx(66.9, rel=1e-2)
    assert compute_peak_tflops((9, 0), 132, None, "fp32") is None
    assert compute_peak_tflops((7, 5), 40, 1500, "fp32") is None


def _row(case, device, value, *, dtype="", threads=None, metric="throughput", flags="",
         backend="cuda"):
    return {"case": case, "device": device, "dtype": dtype, "threads": threads,
            "metric": metric, "status": "ok", "value_median": value, "flags": flags,
            "value_best": 1.02 * value,  # the roofline reads the median, not the best
            "gbps_median": value if metric == "bandwidth" else None,
            "gbps_best": 1.02 * value if metric == "bandwidth" else None, "backend": backend}


MEASURED = pd.DataFrame([
    _row("gemm_gpu", "gpu0", 700.0, dtype="bf16"), _row("gemm_gpu", "gpu0", 50.0, dtype="fp32"),
    _row("gemm_gpu", "gpu0", 60.0, dtype="fp64"),
    _row("gemm_host", "cpu", 2.0, dtype="fp64", threads=32),
    _row("gemm_host", "cpu", 4.0, dtype="fp32", threads=32),
    _row("gemm_host", "cpu", 0.1, dtype="fp32", threads=1),
    _row("hbm_triad", "gpu0", 4000.0, metric="bandwidth"),
    _row("hbm_copy", "gpu0", 9000.0, metric="bandwidth", flags="l2_resident"),
    _row("h2d_pinned", "gpu0", 50.0, metric="bandwidth"),
    _row("ddr_triad", "cpu", 200.0, metric="bandwidth"),
])


def test_ceilings_and_ratios_come_from_the_rows():
    compute = compute_ceilings(MEASURED)
    assert compute[0].value == 700.0 and compute[0].dtype == "bf16"
    labels = {(c.device, c.label): c.value for c in bandwidth_ceilings(MEASURED)}
    assert labels == {("cpu", "DDR"): 200.0, ("gpu0", "HBM"): 4000.0, ("gpu0", "L2"): 9000.0,
                      ("gpu0", "host link"): 50.0}
    text = "\n".join(roofline_lines(ceilings(MEASURED)))
    assert "175×" in text  # bf16 700 over fp32 4 with 32 threads
    assert "fp32 against fp32: 12.5×" in text
    assert "against one CPU thread: 7,000×" in text
    assert "20.0×" in text  # HBM 4000 over DDR 200
    assert "bf16 175" in text  # ridge: 700e12 / 4000e9 FLOP per byte
    assert "fp32 20" in text  # the host: 4e12 / 200e9


# Catches: a constant of the project's (~150x, ~30x) set beside the ratios as a claim the user
# asked to check; the sentences state this box's measured ratios and figures alone.
def test_the_ratio_sentences_name_no_reference_ratio_of_their_own():
    text = "\n".join(roofline_lines(ceilings(MEASURED)))
    assert "claim" not in text and "150" not in text and "~" not in text
    shown = {float(x.replace(",", "")) for x in re.findall(r"([\d,.]+)×", text)}
    assert shown == {175.0, 12.5, 7000.0, 20.0}  # every ratio a measured one


def test_simulated_rows_are_never_a_measured_ratio():
    simulated = MEASURED.assign(backend=["simulated"] * 3 + ["host"] * 7)
    text = "\n".join(roofline_lines(ceilings(simulated)))
    assert "no measured ratio" in text and "175×" not in text


def test_the_roofline_has_a_panel_per_device_with_a_ceiling():
    figure = roofline_figure(ceilings(MEASURED), "test box", "SIMULATED")
    assert figure is not None and len(figure.axes) == 2
    assert roofline_figure(ceilings(MEASURED[MEASURED["metric"] == "bandwidth"]), "x",
                           "y") is None
