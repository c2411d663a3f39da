"""`bwprof compare` on fleets (issue 36): runs of more than FLEET_DIGEST_GPUS GPUs show a
digest per figure (GPUs compared, median change, beyond noise worse and better, the worst
GPUs named with their node) and a line saying where every row is, not a row per GPU;
`--all-gpus` shows the table a row per GPU as before; compare.csv, --json, --fail-below and
the exit code are the same either way."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.render.terminal import FLEET_DIGEST_GPUS
from tests.render.test_fleet_digest import make_fleet

NODES = 40
LATER = [0.98] * NODES
LATER[7] = 0.8
LATER[23] = 0.9
LATER[31] = 1.05


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fleets")
    return (make_fleet(root / "a", [1.0] * NODES),
            make_fleet(root / "b", LATER, failed="node5:gpu0"))


def compare(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["compare", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def figure_line(text: str, figure: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(figure + " "))


def test_a_fleet_shows_the_digest_not_a_row_per_gpu(pair):
    code, text, _ = compare(str(pair[0]), str(pair[1]))
    assert code == 0
    assert "fleet digest (headline figures; B vs baseline A; 40 GPUs" in text
    assert "node12:gpu0" not in text  # no GPU's own row: only the worst are named
    line = figure_line(text, "hbm_triad 256 MiB")
    # node5's hbm_triad raised in B: 39 of 40 compared; node31 rose 5%, the rest fell.
    assert "39 of 40 GPUs" in line
    assert "-2.0%" in line.split("GPUs")[1].split()[0]
    assert " 38 " in line and " 1 " in line
    worst = line.split("node7:gpu0")[1]
    assert line.index("node7:gpu0 -20.0%") < line.index("node23:gpu0 -10.0%")
    assert "node31" not in worst  # better, not among the worst
    assert "compare.csv (--out)" in text and "--all-gpus" in text and "--json" in text
    assert len(text.splitlines()) < 40


def test_all_gpus_shows_every_gpu_as_the_table_did(pair):
    code, text, _ = compare(str(pair[0]), str(pair[1]), "--all-gpus")
    assert code == 0
    assert "fleet digest" not in text
    for node in range(NODES):
        assert f"hbm_triad node{node}:gpu0 256 MiB" in text
    assert text.rstrip().endswith("shown with --all")


def test_all_shows_a_digest_of_every_measured_row_too(pair):
    code, text, _ = compare(str(pair[0]), str(pair[1]), "--all")
    assert code == 0
    assert "fleet digest (every row; B vs baseline A" in text
    assert "node12:gpu0" not in text
    assert text.rstrip().endswith("--all-gpus` shows them here")


def test_every_row_stays_in_compare_csv_and_json(pair, tmp_path):
    code, text, _ = compare(str(pair[0]), str(pair[1]), "--out", str(tmp_path))
    assert code == 0 and "wrote" in text
    with (tmp_path / "compare.csv").open(newline="") as handle:
        written = list(csv.DictReader(handle))
    code, printed, _ = compare(str(pair[0]), str(pair[1]), "--json")
    rows = json.loads(printed)["rows"]
    assert code == 0 and len(rows) == len(written)
    devices = {row["device"] for row in rows if row["case"] == "hbm_triad"}
    assert {f"node{node}:gpu0" for node in range(NODES)} <= devices


def test_fail_below_and_its_exit_code_do_not_depend_on_the_digest(pair):
    digest = compare(str(pair[0]), str(pair[1]), "--fail-below", "5")
    table = compare(str(pair[0]), str(pair[1]), "--fail-below", "5", "--all-gpus")
    assert digest[0] == table[0] == 1
    assert digest[2] == table[2]
    assert "node7:gpu0" in digest[2] and "node5:gpu0" in digest[2]


@pytest.mark.parametrize("nodes", [FLEET_DIGEST_GPUS, FLEET_DIGEST_GPUS + 1])
def test_the_digest_starts_above_sixteen_gpus(tmp_path, nodes):
    a = make_fleet(tmp_path / "a", [1.0] * nodes)
    b = make_fleet(tmp_path / "b", [0.98] * nodes)
    code, text, _ = compare(str(a), str(b))
    assert code == 0
    assert ("fleet digest" in text) == (nodes > FLEET_DIGEST_GPUS)
    assert (f"hbm_triad node{nodes - 1}:gpu0" in text) == (nodes <= FLEET_DIGEST_GPUS)
