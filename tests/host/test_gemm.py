"""gemm_host through the real executor and runner (quick preset: 512x512), and the product
check every GEMM case shares. Tests check shapes, validation and bookkeeping, never speed."""

from __future__ import annotations

import numpy as np
import pytest

from bwprof.host import gemm
from bwprof.units import KiB
from tests.host.runs import CPUS, run_host_cases


def _run(threads=None):
    return run_host_cases("gemm_host", llc_bytes=64 * KiB, threads=threads)


def test_gemm_host_gives_validated_tflops_rows_per_dtype_and_thread_count():
    rows = _run()
    assert {(r.dtype, r.threads) for r in rows} == {
        (d, t) for d in ("fp64", "fp32") for t in {len(CPUS), 1}}
    for row in rows:
        assert row.status == "ok", row.note
        assert row.metric == "throughput" and row.unit == "TFLOP/s"
        assert row.work_per_op == 2 * 512.0**3
        assert row.value_best is not None and row.value_best > 0
        assert row.gbps_best is None
        assert "BLAS:" in row.note and "512x512" in row.note


def test_a_wrong_or_skipped_product_fails_the_check():
    a, b = gemm.inputs(64, np.float32)
    c = a @ b
    assert gemm.check_block(a, b, c, "fp32") == ""
    skipped = np.zeros_like(c)
    assert "off by" in gemm.check_block(a, b, skipped, "fp32")
    wrong = c.copy()
    wrong[-1, -1] += 1.0
    assert "off by" in gemm.check_block(a, b, wrong, "fp32")
    assert "non-finite" in gemm.check_block(a, b, np.full_like(c, np.nan), "fp32")


@pytest.mark.parametrize("dtype,kind", [("fp64", np.float64), ("fp32", np.float32)])
def test_time_matmul_times_each_multiply_after_a_warm_up(dtype, kind):
    a, b = gemm.inputs(32, kind)
    c = np.empty_like(a)
    samples = gemm.time_matmul(a, b, c, 3)
    assert len(samples) == 3 and all(s > 0 for s in samples)
    assert gemm.check_block(a, b, c, dtype) == ""


def test_blas_reports_itself():
    info = gemm.BlasThreads().info
    assert info.describe()
