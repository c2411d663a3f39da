"""A fleet's checks name their GPU as its rows do ('node1:gpu0') and their node as the box, so a
FAIL among ten thousand GPUs is traced to its machine (issue 36: every check of a fleet read
'gpu0' on box 'vm', the host name every node reported)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import bwprof
from bwprof.analysis.judge import fleet_box_names, judge_run
from bwprof.analysis.spec import Spec
from bwprof.cli import app
from bwprof.schema.meta import MachineIdentity, NodeMeta
from bwprof.schema.rows import CSV_COLUMNS
from bwprof.schema.table import typed_results
from bwprof.store.export import write_system_json

H200 = Path(__file__).resolve().parents[1] / "data" / "h200-quick"
NODES = ("node0", "node1", "node2")
SICK = "node1"


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> Path:
    """The stored H200 run as a fleet folder of three nodes whose hosts all call themselves
    'vm' (as the merge names devices: 'node1:gpu0'), node1's HBM figure halved."""
    base = bwprof.load(H200)
    parts = []
    for name in NODES:
        part = base.results[list(CSV_COLUMNS)].copy()
        part["device"] = name + ":" + part["device"].fillna("").astype(str)
        part["host"] = name
        if name == SICK:
            hbm = part["case"] == "hbm_triad"
            part.loc[hbm, "value_median"] = part.loc[hbm, "value_median"] / 2
        parts.append(part)
    target = tmp_path_factory.mktemp("fleet") / "run"
    target.mkdir()
    typed_results(pd.concat(parts, ignore_index=True)).to_csv(target / "results.csv",
                                                              index=False)
    node = NodeMeta(host=base.meta.host, gpus=base.meta.gpus, telemetry=base.meta.telemetry)
    write_system_json(target, replace(base.meta, nodes={name: node for name in NODES}))
    return target


def _as_one_box(check, box: str, node: str) -> dict[str, object]:
    """A fleet check as the single box would give it: the node left out of its names."""
    fields = check.as_dict()
    if node:
        fields.update(device=str(fields["device"]).removeprefix(f"{node}:"),
                      reason=str(fields["reason"]).replace(f"{node}:", ""))
    fields.update(box=box, run_dir="")
    return fields


def test_each_check_names_its_node_and_gpu_as_the_rows_do(fleet_dir):
    run = bwprof.load(fleet_dir)
    checks = judge_run(run, Spec())
    assert {c.box for c in checks} == set(NODES)  # not 'vm' three times
    rows = set(run.results["device"].astype(str))
    for check in checks:
        assert check.device.startswith(f"{check.box}:"), check
        if check.gpu_model:  # a GPU's check names a GPU the rows name
            assert check.device in rows, check
    failed = [c for c in checks if c.verdict == "FAIL"]
    assert [(c.box, c.device, c.path) for c in failed] == [(SICK, f"{SICK}:gpu0", "hbm")]
    # Every node's checks are the single box's, but for the names (and node1's HBM).
    one = [_as_one_box(c, "", "") for c in judge_run(bwprof.load(H200), Spec())]
    for node in NODES:
        mine = [_as_one_box(c, "", node) for c in checks if c.box == node]
        same = [a == b for a, b in zip(mine, one, strict=True)]
        assert all(same) if node != SICK else same.count(False) == 1


def test_accept_tells_the_nodes_apart_in_its_lines_and_json(fleet_dir):
    runner = CliRunner()
    result = runner.invoke(app, ["accept", "--json", str(fleet_dir)])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.output)
    boxes = {box["box"]: box for box in payload["boxes"]}
    assert set(boxes) == set(NODES)
    assert boxes[SICK]["failed"] == [f"hbm {SICK}:gpu0"]
    assert boxes[SICK]["verdict"] == "FAIL" and boxes["node0"]["verdict"] != "FAIL"
    devices = {c["device"] for c in payload["checks"]}
    assert {f"{n}:gpu0" for n in NODES} <= devices and "gpu0" not in devices
    text = runner.invoke(app, ["accept", str(fleet_dir)]).output
    assert any(line.startswith(f"{SICK}: FAIL") and f"HBM {SICK}:gpu0" in line
               for line in text.splitlines()), text


def test_a_box_label_that_names_one_node_alone_stays_the_box():
    """Host names with box keys ('vm#a1'), each its own: the box is the label, as a fleet
    merged from such hosts names it; a label two nodes share gives way to the node's name."""
    host = bwprof.load(H200).meta.host
    assert host is not None

    def node(box: str | None) -> NodeMeta:
        identity = MachineIdentity(box=box, box_source=None) if box else None
        return NodeMeta(host=replace(host, identity=identity))

    names = fleet_box_names({"a": node("a1"), "b": node("b2"), "c": node(None),
                             "d": node(None), "e": NodeMeta(host=None)})
    label = host.hostname
    assert names == {"a": f"{label}#a1", "b": f"{label}#b2", "c": "c", "d": "d", "e": "e"}


# -- a fleet judged on arrays gives what judging it box by box gives ---------------------------

def _shuffled_fleet(seed: int, nodes: int):
    """A fleet of `nodes` nodes, each one of `judge_cases`' variants with its figures,
    spreads, peaks, sizes and link telemetry moved at random (some WARN, FAIL, noisy, a
    trained-down link, a zero peak, a smaller size's better figure, a case left out), its
    rows in a shuffled order."""
    import numpy as np

    from tests.analysis import judge_cases

    rng = np.random.default_rng(seed)
    names = list(judge_cases.VARIANTS)
    run = judge_cases.fleet({f"node{i}": names[int(rng.integers(len(names)))]
                             for i in range(nodes)})
    rows = run.results.copy()
    n = len(rows)
    rows["value_median"] = rows["value_median"] * rng.choice([1.0, 0.9, 0.8, 0.5], size=n)
    rows["cv"] = rows["cv"] * rng.choice([1.0, 1.0, 5.0, 50.0], size=n)
    rows.loc[rng.random(n) < 0.05, "peak_value"] = rng.choice([0.0, np.nan])
    rows.loc[rng.random(n) < 0.05, "pcie_gen_min"] = 4.0
    rows.loc[rng.random(n) < 0.03, "pcie_width_min"] = 8.0
    rows.loc[rng.random(n) < 0.03, "telemetry_samples"] = 0.0
    dropped = rng.random(n) < 0.03
    twins = rows[rng.random(n) < 0.15].copy()  # beside a row: its size again, or half of it
    twins["value_median"] = twins["value_median"] * rng.choice([1.1, 0.9, 1.0], size=len(twins))
    halved = rng.random(len(twins)) < 0.3
    twins.loc[halved, "size_bytes"] = twins.loc[halved, "size_bytes"] // 2
    rows = pd.concat([rows[~dropped], twins], ignore_index=True)
    rows = rows.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    return replace(run, results=rows)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_fleet_judged_on_arrays_is_judged_as_box_by_box(monkeypatch, seed):
    """`_judge_fleet` picks every GPU's figures on arrays and leaves a box with rows that
    raised, latency rows or a busy figure to `_Judge`: check for check, field for field,
    the same as every box judged by `_Judge` (what the judge was before, issue 36)."""
    from bwprof.analysis import judge
    from tests.analysis import judge_cases

    run = _shuffled_fleet(seed, 60)
    for spec in judge_cases.specs().values():
        fast = judge_cases.serialised(judge.judge_run(run, spec))
        with monkeypatch.context() as patch:
            patch.setattr(judge, "_judge_fleet", lambda *args: None)
            slow = judge_cases.serialised(judge.judge_run(run, spec))
        assert len(fast) == len(slow)
        for index, (new, old) in enumerate(zip(fast, slow, strict=True)):
            assert new == old, f"check {index}"
        verdicts = {json.loads(line)[7][1] for line in fast}
        assert {"PASS", "WARN", "FAIL", "CANNOT_JUDGE"} <= verdicts


def test_most_boxes_of_a_sound_fleet_are_judged_on_arrays(monkeypatch):
    """The array judging is what judges a fleet, not the box-by-box fallback: only the
    boxes whose rows raised, were busy or have latency rows go to `_Judge`."""
    from bwprof.analysis import judge
    from tests.analysis import judge_cases

    judged: list[str] = []
    original = judge._judge_boxes

    def counted(run, spec, boxes, *args, **kwargs):
        judged.extend(box.prefix for box in boxes)
        return original(run, spec, boxes, *args, **kwargs)

    monkeypatch.setattr(judge, "_judge_boxes", counted)
    run = judge_cases.fleet({"a": "same", "b": "nvlink_down", "c": "link_fault",
                             "d": "failed", "e": "latency", "f": "busy_noisy"})
    judge.judge_run(run, Spec())
    assert judged == ["d:", "e:", "f:"]


def test_the_answer_names_the_failing_gpus_node(fleet_dir):
    """`report`'s verdict line (`answer`) names the GPU that decides a fleet's FAIL with its
    node, as accept does."""
    from bwprof.analysis.answer import answer

    found = answer(bwprof.load(fleet_dir))
    assert found.verdict == "FAIL" and found.worst is not None
    assert found.worst.device == f"{SICK}:gpu0"
    assert f"worst: HBM {SICK}:gpu0 (hbm_triad)" in found.line()
