"""`bwprof accept` on a fleet (issue 36): more than FLEET_DIGEST_GPUS GPUs get a digest
(the verdict first, per path and case the GPUs by verdict, the worst GPUs named with their
node, where every check is) that does not grow with the fleet; `--all-gpus` prints every
check as before, `--json` keeps them all, and the exit codes are as they were."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import bwprof
from bwprof.analysis import outliers as fleet
from bwprof.analysis.acceptance import Acceptance
from bwprof.analysis.judge import CANNOT_JUDGE, ERROR, FAIL, PASS, WARN, verdict_line
from bwprof.analysis.spec import Spec
from bwprof.cli import app
from bwprof.render.accept import digest_lines, text_lines
from bwprof.render.terminal import FLEET_DIGEST_GPUS
from tests.analysis.test_acceptance_digest import check

SOURCE = Path(__file__).resolve().parent.parent / "data" / "h200-quick"
FIGURES = ("value_median", "value_best", "gbps_median", "gbps_best", "copy_gbps_median",
           "copy_gbps_best")


def acceptance(gpus: int, bad: bool = True) -> Acceptance:
    """A fleet of `gpus` one-GPU nodes: a host and two GPU paths each; with `bad`, node3
    fails HBM, node5 warns on it, node6's HBM raised."""
    checks = []
    for n in range(gpus):
        checks.append(check(n, CANNOT_JUDGE, "ddr", "ddr_triad", None, "cpu",
                            "no band: no DDR peak"))
        verdict, pct = PASS, 100.0 + n % 7
        if bad and n == 3:
            verdict, pct = FAIL, 70.0
        elif bad and n == 5:
            verdict, pct = WARN, 92.0
        elif bad and n == 6:
            verdict, pct = ERROR, None
        checks.append(check(n, verdict, pct=pct, reason="below 3528 GB/s (73% of peak)"
                            if verdict == FAIL else ""))
        checks.append(check(n, PASS, "d2d", "d2d_copy", 101.0 + n % 3))
    return Acceptance(checks, Spec(), fleet.outliers(checks, Spec().outlier_pct), [])


def test_a_fleet_gets_its_verdict_first_the_counts_per_case_and_the_worst_gpus_by_node():
    result = acceptance(FLEET_DIGEST_GPUS + 4)
    lines = text_lines(result, 400)  # a line each, unwrapped
    assert lines[0].startswith(f"FAIL — {FLEET_DIGEST_GPUS + 4} boxes, "
                               f"{FLEET_DIGEST_GPUS + 4} GPUs, 60 checks: ")
    assert lines[1] == "boxes: 1 fail, 1 warn, 18 pass"
    assert lines[2].startswith("node3: FAIL — 3 checks") and lines[3].startswith("node5: WARN")
    assert lines[4].startswith("node6: PASS") and "bwprof error" in lines[4]
    header = next(line for line in lines if line.startswith("path "))
    assert header.split() == ["path", "case", "on", "PASS", "WARN", "FAIL", "ERROR",
                              "CANNOT", "JUDGE", "lowest", "%band"]
    hbm = next(line for line in lines if line.startswith("HBM "))
    assert hbm.split()[:9] == ["HBM", "hbm_triad", "20", "GPUs", "17", "1", "1", "1", "0"]
    assert hbm.endswith("70.0 node3:gpu0")
    ddr = next(line for line in lines if line.startswith("DDR "))
    assert ddr.split()[:9] == ["DDR", "ddr_triad", "20", "hosts", "0", "0", "0", "0", "20"]
    worst = next(line for line in lines if line.startswith("FAIL HBM"))
    assert worst.startswith("FAIL HBM hbm_triad on 3 of 20 GPUs (1 fail, 1 warn, 1 bwprof "
                            "error), worst first: node3:gpu0 FAIL 2800 GB/s, 70.0% of band: "
                            "below 3528 GB/s (73% of peak); node5:gpu0 WARN")
    assert "node6:gpu0 ERROR" in worst
    assert "cannot judge DDR ddr_triad on 20 hosts: no band: no DDR peak" in lines
    assert lines[-1] == ("every check (60) is in `bwprof accept --json`; `bwprof accept "
                         "--all-gpus` lists each here")
    assert not any(line.startswith("node10") for line in lines)  # a passing box: counted


def test_the_digest_does_not_grow_with_the_fleet():
    small, large = text_lines(acceptance(20), 400), text_lines(acceptance(400), 400)
    assert len(small) == len(large) < 40  # unwrapped: 400 boxes' figures are longer
    passing = text_lines(acceptance(400, bad=False), 400)
    assert passing[:2] == ["PASS — 400 boxes, 400 GPUs, 1200 checks: 800 pass, 400 cannot "
                           "judge (DDR not judged anywhere)", "boxes: 400 pass"]
    assert not any(line.startswith(("FAIL ", "WARN ", "ERROR ")) for line in passing)


def test_sixteen_gpus_keep_the_fleet_table_and_all_gpus_shows_it_for_more():
    few = acceptance(FLEET_DIGEST_GPUS)
    old = [*fleet.fleet_lines(few.rows, few.outliers), "",
           *(verdict_line(box, checks) for (_, box), checks in few.boxes.items())]
    assert text_lines(few, 400) == old
    many = acceptance(FLEET_DIGEST_GPUS + 1)
    lines = text_lines(many, 400, all_gpus=True)
    assert len([line for line in lines if " H200 " in line]) == FLEET_DIGEST_GPUS + 1
    assert lines[-1].startswith(f"node{FLEET_DIGEST_GPUS}: PASS — 3 checks")


def test_the_digest_names_the_file_written_with_every_check(tmp_path):
    lines = digest_lines(acceptance(20), 400, [tmp_path / "accept.csv",
                                               tmp_path / "accept_fleet.csv"])
    assert lines[-1] == (f"every check (60) is in `bwprof accept --json` and in "
                         f"{tmp_path / 'accept.csv'}; `bwprof accept --all-gpus` lists each "
                         "here")


def test_a_gpu_whose_box_is_not_its_node_is_named_with_both():
    result = acceptance(20)
    result.checks[4] = replace(result.checks[4], box="gpu-a#3f2a9c")  # node1's HBM
    result.checks[4] = replace(result.checks[4], verdict=FAIL, pct_of_band=10.0)
    assert any("node1:gpu0 (gpu-a#3f2a9c) FAIL" in line for line in digest_lines(result, 400))


def make_fleet(target: Path, scales: list[float]) -> Path:
    """A fleet run folder: a node per scale, each the stored H200 run's rows with figures
    times its scale; each node's host is named as the node, so that its box is too."""
    from bwprof.schema.meta import NodeMeta
    from bwprof.schema.rows import CSV_COLUMNS
    from bwprof.schema.table import typed_results
    from bwprof.store.export import write_system_json

    base = bwprof.load(SOURCE)
    one = base.results[list(CSV_COLUMNS)]
    names = [f"node{i}" for i in range(len(scales))]
    frame = pd.concat([one] * len(names), ignore_index=True)
    node = pd.Series(names).repeat(len(one)).reset_index(drop=True)
    frame["device"] = node + ":" + pd.concat([one["device"].astype(str)] * len(names),
                                             ignore_index=True)
    frame["host"] = node
    frame["rank"] = pd.Series(range(len(names))).repeat(len(one)).reset_index(drop=True)
    scale = pd.Series(scales).repeat(len(one)).reset_index(drop=True)
    for column in FIGURES:
        frame[column] = frame[column] * scale
    target.mkdir(parents=True, exist_ok=True)
    typed_results(frame).to_csv(target / "results.csv", index=False)
    meta = base.meta
    assert meta.host is not None
    nodes = {name: NodeMeta(host=replace(meta.host, hostname=name, identity=None),
                            gpus=meta.gpus, telemetry=meta.telemetry) for name in names}
    write_system_json(target, replace(meta, run_id="fleet", simulated=False, nodes=nodes))
    return target


@pytest.fixture(scope="module")
def failing_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scales = [1.0] * 20
    scales[7] = 0.8  # HBM and the links below their FAIL lines
    return make_fleet(tmp_path_factory.mktemp("fleet") / "run", scales)


def accept(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["accept", *args], env={"COLUMNS": "400"})
    return result.exit_code, result.stdout


def test_the_command_digests_a_failing_fleet_and_exits_1(failing_fleet):
    code, out = accept(str(failing_fleet))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("FAIL — 20 boxes, 20 GPUs, ") and len(lines) < 40
    assert lines[2].startswith("node7: FAIL")
    assert any(line.startswith("FAIL HBM hbm_triad on 1 of 20 GPUs (1 fail), worst first: "
                               "node7:gpu0 FAIL ") for line in lines)
    code, out = accept(str(failing_fleet), "--all-gpus")
    assert code == 1 and len([line for line in out.splitlines()
                              if line.startswith("node") and " H200 " in line]) == 20
    code, out = accept(str(failing_fleet), "--json")
    assert code == 1 and len(json.loads(out)["checks"]) == 220


def test_the_command_exits_0_on_a_passing_fleet(tmp_path):
    code, out = accept(str(make_fleet(tmp_path / "run", [1.0] * 17)))
    assert code == 0 and out.startswith("PASS — 17 boxes, 17 GPUs, ")


def test_the_fleet_table_names_a_fleet_gpu_without_its_node():
    lines = fleet.fleet_lines(acceptance(3).rows, [])
    assert [line.split()[:2] for line in lines[2:5]] == [["node0", "gpu0"], ["node1", "gpu0"],
                                                         ["node2", "gpu0"]]


def test_several_run_folders_name_each_box_and_gpu_with_its_run():
    one, two = acceptance(10), acceptance(10)
    checks = one.checks + [replace(c, run_dir="other") for c in two.checks]
    lines = digest_lines(Acceptance(checks, Spec(), [], []), 400)
    assert lines[0].startswith("FAIL — 20 boxes, 20 GPUs in 2 run folders, 60 checks: ")
    assert lines[2].startswith("node3 in run: FAIL") and lines[3].startswith("node3 in other: FAIL")
    worst = next(line for line in lines if line.startswith("FAIL HBM"))
    assert "node3:gpu0 in run FAIL" in worst and "node3:gpu0 in other FAIL" in worst
