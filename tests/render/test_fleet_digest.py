"""The terminal's fleet digest (issue 36): a run of more than FLEET_DIGEST_GPUS GPUs shows a
row per path (count, median, lowest, highest, below band), the worst GPUs, a line per
overlap case and each repeated note once, not a row per GPU; `--all-gpus` shows every GPU
as before, and `--json` keeps every row."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

import bwprof
from bwprof import saved
from bwprof.cli import app
from bwprof.render import terminal

SOURCE = Path(__file__).resolve().parent.parent / "data" / "h200-quick"
FIGURES = ("value_median", "value_best", "gbps_median", "gbps_best", "copy_gbps_median",
           "copy_gbps_best")


def make_fleet(target: Path, scales: list[float], failed: str | None = None) -> Path:
    """A fleet run folder of len(scales) nodes, each the stored H200 run's rows with its
    figures times its scale (as benchmarks/growth_read.py::make_folder names them); the
    `failed` device's hbm_triad rows raised (no figure)."""
    from bwprof.schema.meta import NodeMeta
    from bwprof.schema.rows import CSV_COLUMNS
    from bwprof.schema.table import typed_results
    from bwprof.store.export import write_system_json

    base = bwprof.load(SOURCE)
    one = base.results[list(CSV_COLUMNS)]
    nodes = len(scales)
    names = [f"node{i}" for i in range(nodes)]
    frame = pd.concat([one] * nodes, ignore_index=True)
    node = pd.Series(names).repeat(len(one)).reset_index(drop=True)
    frame["device"] = node + ":" + pd.concat([one["device"].astype(str)] * nodes,
                                             ignore_index=True)
    frame["host"] = node
    frame["rank"] = pd.Series(range(nodes)).repeat(len(one)).reset_index(drop=True)
    scale = pd.Series(scales).repeat(len(one)).reset_index(drop=True)
    for column in FIGURES:
        frame[column] = frame[column] * scale
    if failed is not None:
        broken = (frame["device"] == failed) & (frame["case"] == "hbm_triad")
        frame.loc[broken, list(FIGURES)] = float("nan")
        frame.loc[broken, "status"] = "error"
        frame.loc[broken, "note"] = "RuntimeError: injected"
    frame = typed_results(frame)
    target.mkdir(parents=True, exist_ok=True)
    frame.to_csv(target / "results.csv", index=False)
    meta = base.meta
    node_meta = NodeMeta(host=meta.host, gpus=meta.gpus, telemetry=meta.telemetry)
    write_system_json(target, replace(meta, run_id=f"fleet-{nodes}", simulated=False,
                                      nodes={name: node_meta for name in names}))
    return target


# 40 nodes: most at 1.0, a spread below and above, node7 at 0.8 (HBM below its band)
SCALES = [1.0 - 0.002 * (i % 9) + 0.001 * (i % 4) for i in range(40)]
SCALES[7] = 0.8
SCALES[23] = 0.9
SCALES[31] = 1.05


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("fleet") / "run", SCALES)


def text_of(folder: Path, all_gpus: bool = False) -> str:
    report = saved.make_run_report(str(folder), plots=False, write=False)
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, force_terminal=False, color_system=None)
    saved.print_run_report(console, report, run_dir="RUN", warn=False, all_gpus=all_gpus)
    return buffer.getvalue()


# Catches: a digest whose median, lowest, highest or count is not the summary's
def test_digest_figures_are_the_summary_s(fleet: Path) -> None:
    run = bwprof.load(fleet)
    summary = run.summary
    digest = terminal.fleet_digest(summary, run.checks)
    measured = summary[summary["value"].notna() & (summary["backend"] != "simulated")]
    groups = measured.groupby(["path", "case", "direction"], sort=False)["value"]
    assert len(digest) == groups.ngroups
    for row in digest.to_dict("records"):
        values = measured[(measured["path"] == row["path"]) & (measured["case"] == row["case"])
                          & (measured["direction"] == row["direction"])]
        assert row["count"] == len(values) == 40
        assert row["median"] == pytest.approx(values["value"].median())
        assert row["lowest"] == pytest.approx(values["value"].min())
        assert row["highest"] == pytest.approx(values["value"].max())
        assert row["lowest_on"] == values.loc[values["value"].idxmin(), "device"]
        assert row["highest_on"] == values.loc[values["value"].idxmax(), "device"]
    hbm = digest[digest["case"] == "hbm_triad"].iloc[0]
    assert hbm["lowest_on"] == "node7:gpu0" and hbm["highest_on"] == "node31:gpu0"


# Catches: worst GPUs that are not the lowest figures, more than five, or a wrong % of median
def test_worst_gpus_are_the_lowest_against_the_median(fleet: Path) -> None:
    run = bwprof.load(fleet)
    summary = run.summary
    digest = terminal.fleet_digest(summary, run.checks)
    hbm = summary[(summary["case"] == "hbm_triad") & summary["value"].notna()]
    median = hbm["value"].median()
    expected = hbm[hbm["value"] < median].nsmallest(5, "value")
    worst = digest[digest["case"] == "hbm_triad"].iloc[0]["worst"]
    assert [device for device, _, _ in worst] == expected["device"].tolist()
    assert [pct for _, _, pct in worst] == pytest.approx(
        (100 * expected["value"] / median).tolist())
    assert worst[0][0] == "node7:gpu0" and worst[1][0] == "node23:gpu0"
    lines = terminal.fleet_worst_lines(summary, run.checks)
    hbm_line = next(line for line in lines if line.startswith("worst hbm_triad"))
    assert f"node7:gpu0 {terminal._gbps(worst[0][1])} ({worst[0][2]:.0f}%)" in hbm_line
    assert all(line.count("(") <= 1 + terminal.FLEET_WORST for line in lines)


# Catches: a below-band count that is not the verdicts' (WARN or FAIL per case)
def test_below_band_counts_the_verdicts(fleet: Path) -> None:
    run = bwprof.load(fleet)
    digest = terminal.fleet_digest(run.summary, run.checks).set_index("case")
    hbm_checks = [c for c in run.checks if c.case == "hbm_triad"]
    warn = hbm_checks[0].warn
    assert warn is not None
    hbm = run.summary[(run.summary["case"] == "hbm_triad") & run.summary["value"].notna()]
    below = int((hbm["value"] < warn).sum())
    assert below >= 1  # node7 at 0.8 of the stored figure
    assert digest.loc["hbm_triad", "below"] == below
    verdicts = Counter(c.case for c in run.checks if c.verdict in ("WARN", "FAIL"))
    judged = {c.case for c in run.checks if c.verdict in ("PASS", "WARN", "FAIL")}
    for case, count in digest["below"].items():
        if case in judged:
            assert count == verdicts[case]
        else:
            assert pd.isna(count)  # no verdict: nothing said


# Catches: a fleet shown as a row per GPU, repeated notes, or per-GPU overlap lines
def test_terminal_shows_the_digest(fleet: Path) -> None:
    text = text_of(fleet)
    assert "bwprof fleet digest (40 GPUs" in text
    assert "bwprof summary" not in text
    assert terminal.ALL_GPUS_LINE in text
    # d2d_copy's note once, with how many GPUs carry it
    note = [line for line in text.splitlines() if line.startswith("HBM d2d_copy:")]
    assert len(note) == 1 and note[0].endswith("(on 40 GPUs)")
    overlap = [line for line in text.splitlines() if "overlap efficiency" in line]
    assert len(overlap) == 4 and all("on 40 GPUs" in line for line in overlap)
    assert "pipeline_chunked on 40 GPUs" in text
    assert "node12:gpu0" not in text  # a GPU neither lowest, highest nor worst
    assert len(text.splitlines()) < 60


# Catches: --all-gpus not giving the per-GPU table and lines, or --json losing rows
def test_all_gpus_and_json_keep_every_gpu(fleet: Path, tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "250"})  # a table row on one line, whatever the suite set
    result = runner.invoke(app, ["report", str(fleet), "--no-plots", "--all-gpus",
                                 "--out", str(tmp_path / "all")])
    assert result.exit_code == 0, result.output
    assert "bwprof summary" in result.output and "fleet digest" not in result.output
    for i in range(40):
        assert f"hbm_triad node{i}:gpu0" in result.output
    assert result.output.count("HBM d2d_copy:") == 40
    per_gpu = [line for line in result.output.splitlines() if "overlap efficiency" in line]
    assert len(per_gpu) == 4 * 40
    digest = runner.invoke(app, ["report", str(fleet), "--no-plots",
                                 "--out", str(tmp_path / "digest")])
    assert digest.exit_code == 0 and "fleet digest" in digest.output
    assert len(pd.read_csv(tmp_path / "digest" / "summary.csv")) == len(
        bwprof.load(fleet).summary)
    document = json.loads(runner.invoke(app, ["report", str(fleet), "--json"]).stdout)
    assert len(document["summary"]) == len(bwprof.load(fleet).summary)
    assert len(document["lines"]["overlap"]) >= 4 * 40


# Catches: a threshold off by one (16 GPUs is a box's table, 17 a fleet's digest)
@pytest.mark.parametrize(("nodes", "digest"), [(16, False), (17, True)])
def test_threshold(tmp_path: Path, nodes: int, digest: bool) -> None:
    assert terminal.FLEET_DIGEST_GPUS == 16
    text = text_of(make_fleet(tmp_path / "run", [1.0] * nodes))
    assert ("bwprof fleet digest" in text) is digest
    assert ("bwprof summary" in text) is not digest


# Catches: a digest that grows with the fleet (the same lines for 20 GPUs as for 120: so
# for a thousand, without the cost of building one in the suite)
def test_the_digest_does_not_grow_with_the_fleet(tmp_path: Path) -> None:
    def lines(nodes: int) -> int:
        figures = [1.0 - 0.0001 * (i % 10) for i in range(nodes)]
        text = text_of(make_fleet(tmp_path / f"run{nodes}", figures))
        assert f"bwprof fleet digest ({nodes} GPUs" in text
        return len(text.splitlines())
    assert lines(20) == lines(120) < 200


# Catches: a GPU without a figure dropped from the count silently
def test_a_gpu_without_a_figure_is_counted_as_such(tmp_path: Path) -> None:
    folder = make_fleet(tmp_path / "run", [1.0] * 20, failed="node5:gpu0")
    run = bwprof.load(folder)
    digest = terminal.fleet_digest(run.summary, run.checks).set_index("case")
    assert digest.loc["hbm_triad", "count"] == 19 and digest.loc["hbm_triad", "rows"] == 20
    assert digest.loc["d2d_copy", "count"] == digest.loc["d2d_copy", "rows"] == 20
    text = text_of(folder)
    assert "19 of 20 GPUs" in text
    assert "bwprof error in hbm_triad node5:gpu0" in text
