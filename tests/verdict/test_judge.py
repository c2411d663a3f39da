"""The verdict line: what failed and why, in the words a reviewer acts on."""

from __future__ import annotations

from bwprof.verdict.judge import Check, verdict_line


def check(path: str, case: str, verdict: str, value: float, warn: float, reason: str,
          device: str = "gpu0") -> Check:
    return Check(box="vm", run_dir="r", device=device, gpu_model="NVIDIA H200", part="H200",
                 path=path, case=case, verdict=verdict, reason=reason, value=value,
                 warn=warn, fail=warn * 0.9, expected=warn / 0.95, reference=warn / 0.8,
                 pct_of_band=100 * value * 0.95 / warn, pct_of_peak=80 * value / warn)


def test_cases_of_one_path_are_told_apart():
    """Four overlap cases warning read as one path four times over."""
    line = verdict_line("vm", [
        check("overlap", "overlap_h2d_compute", "WARN", 0.99, 1.0, "0.990 (median)"),
        check("overlap", "overlap_bidir_compute", "WARN", 0.95, 1.0, "0.950 (median)")])
    assert "WARN overlap_h2d_compute gpu0 " in line
    assert "WARN overlap_bidir_compute gpu0 " in line


def test_a_fault_that_fails_a_passing_figure_is_named_not_its_percentage():
    fault = "link trained at Gen5 x8 under load, below its Gen5 x16 maximum"
    line = verdict_line("vm", [
        check("h2d", "h2d_pinned", "FAIL", 55.5, 53.1, f"{fault}; 55.5 GB/s (median)"),
        check("hbm", "hbm_triad", "FAIL", 3000, 3942, "3000 GB/s (median); below 3528")])
    assert f"FAIL H2D gpu0 {fault}" in line
    assert "FAIL HBM gpu0 72% of band" in line  # a figure's own failure keeps its figure
