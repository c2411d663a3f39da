"""`--model`: parsing, and the arithmetic checked against hand calculations."""

import json
import math

import pytest
from typer.testing import CliRunner

from bwprof.analysis.model import _duration, model_lines, model_report, parse_model
from bwprof.analysis.summary import build_summary
from bwprof.cli import app
from bwprof.errors import BwprofError
from bwprof.schema.table import read_results, results_frame
from tests.conftest import DATA
from tests.schema.builders import gpu, gpus, meta
from tests.store.test_export import make_row

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "parameters", "dtype", "weight_bytes"),
    [("70e9:bf16", 70e9, "bf16", 140_000_000_000), ("70B:fp16", 70e9, "fp16", 140_000_000_000),
     ("8b:fp8", 8e9, "fp8", 8_000_000_000), ("405e9:int4", 405e9, "int4", 202_500_000_000),
     ("7000000000:fp32", 7e9, "fp32", 28_000_000_000), (" 1.5e9 : int8 ", 1.5e9, "int8",
                                                         1_500_000_000),
     ("3e0:int4", 3, "int4", 2),  # 1.5 bytes round up; a tiny count is said with an exponent
     ("500K:fp16", 5e5, "fp16", 1_000_000), ("125m:fp32", 125e6, "fp32", 500_000_000),
     ("1.8T:fp8", 1.8e12, "fp8", 1_800_000_000_000), ("1000:fp16", 1e3, "fp16", 2000)],
)
def test_parse_model(text, parameters, dtype, weight_bytes):
    spec = parse_model(text)
    assert (spec.parameters, spec.dtype, spec.weight_bytes) == (parameters, dtype, weight_bytes)


@pytest.mark.parametrize("text", ["70e9", "70e9:bf17", "bf16:70e9", "70X:bf16", "0:fp16",
                                  "-5:fp16", "1e999:fp16", "1e308:fp32", ""])
def test_malformed_model_is_one_line(text):
    with pytest.raises(BwprofError, match="--model") as info:
        parse_model(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "hint"), [("70:bf16", "70e9:bf16 or 70B:bf16"),
                                            ("405:INT4", "405e9:int4 or 405B:int4"),
                                            ("1.5:fp8", "1.5e9:fp8 or 1.5B:fp8")])
def test_a_bare_count_of_a_few_parameters_is_refused_with_the_spelling(text, hint):
    """'70:bf16' is 70 billion with its B left out, not a model of 70 parameters (whose
    times printed as '0 µs')."""
    with pytest.raises(BwprofError, match=r"reads as .* parameters") as info:
        parse_model(text)
    assert hint in str(info.value) and "suffixes K, M, B, T" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("seconds", "shown"), [
    (2.5, "2.50 s"), (0.0123, "12.3 ms"), (123.4e-6, "123 µs"), (1.234e-6, "1.23 µs"),
    (5e-7, "500 ns"), (1.5e-9, "1.5 ns"), (4e-10, "< 1 ns")])
def test_a_time_is_never_shown_as_zero(seconds, shown):
    assert _duration(seconds) == shown


def test_a_tiny_models_times_keep_their_digits():
    """A thousand fp16 parameters over 40 GB/s take 50 ns: said as such, never '0 µs'."""
    rows = [_gpu("h2d_pinned", "gpu0", 40.0, 63.0)]
    frame = results_frame(rows)
    report = model_report(parse_model("1K:fp16"), build_summary(frame),
                          _system(80_000_000_000, 1), frame)
    text = "\n".join(model_lines(report))
    assert "50 ns (40.0 GB/s)" in text and " 0 µs" not in text
    assert "= 2.00 kB of weights" in text  # not 0.00 GB


def _gpu(case, device, gbps, peak, direction="h2d", memory="pinned"):
    return make_row(case=case, backend="cuda", device=device, device_name="H200",
                    memory=memory, direction=direction, threads=None, size_bytes=1 << 30,
                    gbps_median=gbps, gbps_best=gbps * 1.02, peak_gbps=peak)


def _system(memory_bytes, count):
    return meta(gpus=gpus(*(gpu(i, name="H200", total_memory_bytes=memory_bytes)
                            for i in range(count))))


def test_model_arithmetic_matches_a_hand_calculation():
    rows = [
        make_row(gbps_median=200.0, gbps_best=200.0 * 1.02),
        # one node alone: not the host
        make_row(device="numa1", numa_node=1, gbps_median=90.0, gbps_best=90.0 * 1.02),
        _gpu("h2d_pinned", "gpu0", 50.0, 63.0), _gpu("h2d_pinned", "gpu1", 40.0, 63.0),
        _gpu("h2d_all", "all", 80.0, 126.0),
        _gpu("hbm_triad", "gpu0", 4000.0, 4800.0, "within", "hbm"),
        _gpu("hbm_triad", "gpu1", 3500.0, 4800.0, "within", "hbm"),
    ]
    summary = build_summary(results_frame(rows))
    report = model_report(parse_model("70e9:bf16"), summary, _system(80_000_000_000, 2))
    assert report.weight_bytes == 140e9
    assert report.gpu_memory_bytes == 80e9 and report.fits_one_gpu is False
    assert report.gpus_needed == 2  # ceil(140 / 80)
    timings = {t.what: t for t in report.timings}
    one = timings["stage host→GPU, one GPU"]
    assert (one.device, one.gbps) == ("gpu1", 40.0)  # the slowest GPU
    assert one.seconds == pytest.approx(140e9 / 40e9)  # 3.5 s
    assert one.peak_seconds == pytest.approx(140e9 / 63e9)
    every = timings["stage host→GPU, all 2 GPUs at once"]
    assert every.seconds == pytest.approx(140e9 / 80e9)  # 1.75 s
    assert every.peak_seconds == pytest.approx(140e9 / 126e9)
    hbm = timings["one pass over the weights in HBM, on 2 GPU(s)"]
    assert hbm.bytes == 70e9 and hbm.gbps == 3500.0
    assert hbm.seconds == pytest.approx(70e9 / 3500e9)  # 20 ms
    assert hbm.peak_seconds == pytest.approx(70e9 / 4800e9)
    ddr = timings["one pass over the weights in host DDR"]
    assert ddr.seconds == pytest.approx(140e9 / 200e9) and ddr.peak_seconds is None
    text = "\n".join(model_lines(report))
    assert "140.00 GB of weights" in text and "needs 2 GPUs" in text
    assert "3.50 s (40.0 GB/s)" in text and "20.0 ms (3500.0 GB/s)" in text


def _gemm(device, dtype, tflops, peak=None):
    return make_row(case="gemm_gpu", backend="cuda", device=device, device_name="H200",
                    memory="hbm", threads=None, size_bytes=1 << 27, metric="throughput",
                    unit="TFLOP/s", gbps_best=None, gbps_median=None, value_best=tflops,
                    value_median=tflops, peak_value=peak, dtype=dtype)


def test_the_compute_side_holds_a_tokens_matmuls_against_the_weights_pass():
    """70B bf16 on two 80 GB GPUs: each streams its 70 GB half at the slower GPU's 3500 GB/s
    (20 ms); a token's 6 x 70e9 FLOP at the slower GPU's best bf16 (600 TFLOP/s) take
    0.7 ms on one GPU, 0.35 ms spread over both, so ~57 tokens outlast the pass (not 29)."""
    rows = [_gpu("hbm_triad", "gpu0", 4000.0, 4800.0, "within", "hbm"),
            _gpu("hbm_triad", "gpu1", 3500.0, 4800.0, "within", "hbm"),
            _gemm("gpu0", "bf16", 700.0, 989.0), _gemm("gpu1", "bf16", 600.0, 989.0),
            _gemm("gpu1", "bf16", 500.0, 989.0), _gemm("gpu0", "fp64", 60.0)]
    frame = results_frame(rows)
    report = model_report(parse_model("70e9:bf16"), build_summary(frame),
                          _system(80_000_000_000, 2), frame)
    (bf16,) = report.compute
    assert (bf16.device, bf16.tflops, bf16.flop) == ("gpu1", 600.0, 6 * 70e9)
    assert bf16.seconds == pytest.approx(4.2e11 / 600e12)
    assert bf16.peak_seconds == pytest.approx(4.2e11 / 989e12)
    assert bf16.tokens_to_match_weights == pytest.approx(2 * (70e9 / 3500e9) / (4.2e11 / 600e12))
    text = "\n".join(model_lines(report))
    assert "0.042 TFLOP" not in text and "= 0.42 TFLOP:" in text and "(600 TFLOP/s)" in text
    assert "compute-bound from ~57 tokens (bf16, spread over the 2 GPU(s)" in text
    # fp8 weights: no fp8 multiply measured, and the report says so.
    fp8 = model_report(parse_model("70e9:fp8"), build_summary(frame),
                       _system(80_000_000_000, 2), frame)
    assert fp8.compute == []
    assert "fp8 matrix multiplies: gemm_gpu measured bf16, fp64 only" in fp8.missing


def test_a_host_only_compute_figure_keeps_its_digits():
    rows = [make_row(gbps_median=20.0, gbps_best=20.0 * 1.02),
            make_row(case="gemm_host", metric="throughput", unit="TFLOP/s", gbps_best=None,
                     gbps_median=None, value_best=0.0152, value_median=0.0150, dtype="fp32")]
    frame = results_frame(rows)
    report = model_report(parse_model("1e9:fp32"), build_summary(frame), meta(), frame)
    text = "\n".join(model_lines(report))
    assert "(0.0152 TFLOP/s)" in text and "compute-bound" not in text  # no HBM on a host


# Catches: a fleet run's every-GPU rows ('node7:all') are not found, nor said missing
def test_a_fleet_runs_every_gpu_rows_are_found_per_node():
    rows = [_gpu("h2d_pinned", "n1:gpu0", 50.0, 63.0), _gpu("h2d_pinned", "n1:gpu1", 50.0, 63.0),
            _gpu("h2d_all", "n1:all", 90.0, 126.0), _gpu("h2d_all", "n2:all", 70.0, 126.0)]
    report = model_report(parse_model("70e9:bf16"), build_summary(results_frame(rows)),
                          _system(80_000_000_000, 2))
    timings = {t.what: t for t in report.timings}
    every = timings["stage host→GPU, all 2 GPUs at once"]
    assert (every.device, every.gbps) == ("n2:all", 70.0)  # the slowest node
    assert timings["stage host→GPU, one GPU"].device in ("n1:gpu0", "n1:gpu1")


def test_a_model_that_fits_one_gpu():
    rows = [_gpu("hbm_triad", "gpu0", 4000.0, None, "within", "hbm")]
    report = model_report(parse_model("8e9:fp8"), build_summary(results_frame(rows)),
                          _system(141_000_000_000, 1))
    assert report.fits_one_gpu is True and report.gpus_needed == 1
    (hbm,) = report.timings
    assert hbm.seconds == pytest.approx(8e9 / 4000e9) and hbm.peak_seconds is None
    assert "fits on one GPU" in "\n".join(model_lines(report))


def test_a_time_the_run_has_no_figure_for_says_why():
    """A host-only run whose DDR arrays fit in the cache: no DDR time, and the reason."""
    rows = [make_row(gbps_median=90.0, gbps_best=90.0 * 1.02, flags=frozenset({"in_cache"}))]
    report = model_report(parse_model("8e9:fp8"), build_summary(results_frame(rows)), meta())
    assert report.timings == []
    (line,) = [line for line in model_lines(report) if line.startswith("no time for")]
    assert line.startswith("no time for one pass over the weights in host DDR: in cache: ")
    # GPU times are not missed on a run without GPUs: the GPU line already says so.
    assert len(report.missing) == 1


def test_report_model_on_the_stored_runs(tmp_path):
    result = runner.invoke(app, ["report", str(DATA / "host-ddr"), "--model", "70e9:bf16",
                                 "--out", str(tmp_path), "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "no GPU in this run" in result.output
    ddr = build_summary(read_results(DATA / "host-ddr" / "results.csv")).iloc[0]["gbps"]
    assert f"{140e9 / (ddr * 1e9):.2f} s ({ddr:.1f} GB/s)" in result.output

    result = runner.invoke(app, ["report", str(DATA / "sim-a"), "--model", "1e6:fp16",
                                 "--out", str(tmp_path), "--no-plots", "--json"])
    assert result.exit_code == 0, result.output
    model = json.loads(result.output)["model"]
    summary = build_summary(read_results(DATA / "sim-a" / "results.csv"))
    h2d = summary[summary["case"] == "h2d_pinned"]["gbps"].min()
    one = next(t for t in model["timings"] if t["what"] == "stage host→GPU, one GPU")
    assert one["backend"] == "simulated"  # labelled, and in JSON only
    assert math.isclose(one["seconds"], 2e6 / (h2d * 1e9))
    assert model["gpus_needed"] == 1 and model["gpu_memory_bytes"] == 64 << 20

    text = runner.invoke(app, ["report", str(DATA / "sim-a"), "--model", "1e6:fp16",
                               "--out", str(tmp_path), "--no-plots"]).output
    assert "simulated (not a measurement)" in text
    assert f"({h2d:.1f} GB/s)" not in text


def test_the_fit_is_judged_on_the_smallest_gpu():
    system = meta(gpus=gpus(*(gpu(i, name=n, total_memory_bytes=m)
                              for i, (n, m) in enumerate((("H100", 80_000_000_000),
                                                          ("H200", 141_000_000_000))))))
    report = model_report(parse_model("70e9:bf16"), build_summary(results_frame([make_row()])),
                          system)
    assert report.gpu_memory_bytes == 80_000_000_000
    assert report.fits_one_gpu is False and report.gpus_needed == 2
