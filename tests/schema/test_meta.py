"""The typed run metadata: a real run's system.json reads back to the object it was written
from, every stored folder reads, and each kind of damage is one line naming its path."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from bwprof.schema.meta import (
    GpusMeta,
    MetaError,
    ReadOnlyDict,
    RunMeta,
    read_only,
    short_commit,
    version_text,
)
from tests.schema.builders import HOST, gpu, gpus, meta

DATA = Path(__file__).parent.parent / "data"
STORED = sorted(path.parent.name for path in DATA.glob("*/system.json"))


def _holds(written: object, original: object, path: str = "") -> None:
    """Everything the file said, `written` says too (it may add what the model defaults)."""
    if isinstance(original, dict):
        assert isinstance(written, dict), path
        for key, value in original.items():
            assert key in written, f"{path}.{key} dropped"
            _holds(written[key], value, f"{path}.{key}")
    elif isinstance(original, list):
        assert isinstance(written, list) and len(written) == len(original), path
        for index, (mine, theirs) in enumerate(zip(written, original, strict=True)):
            _holds(mine, theirs, f"{path}[{index}]")
    else:
        assert written == original and type(written) is type(original), path


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A simulated two-GPU run with telemetry's reason, the plan and the host filled in."""
    import bwprof

    out = tmp_path_factory.mktemp("run") / "run"
    result = bwprof.run(cases="ddr_triad,h2d_pinned,p2p_copy", size="1MiB", repeats=2,
                        threads="1", preset="quick", simulate=True, out=out, plots=False,
                        command_line=["bwprof", "run"])
    return result, json.loads((out / "system.json").read_text())


def test_a_real_runs_metadata_reads_back_as_the_object_it_was_written_from(real_run):
    result, written = real_run
    read = RunMeta.from_dict(written)
    assert read == result.meta
    assert read.as_dict() == written  # what was written is exactly as_dict()
    assert read.gpus.count == 2 and read.gpus.simulated and read.simulated
    assert [d.label for d in read.gpus.devices] == ["gpu0", "gpu1"]
    assert read.gpus.devices[0].properties.compute_capability == (9, 0)
    assert read.plan is not None and read.plan.cases == ("ddr_triad", "h2d_pinned", "p2p_copy")
    assert read.host is not None and read.host.hostname == read.hostname
    assert read.telemetry is not None and read.telemetry.reason.startswith("simulated backend")
    assert read.findings == 0 and read.command_line == ("bwprof", "run")
    assert result.system == written and isinstance(result.system, ReadOnlyDict)


def test_the_metadata_crosses_mpi_as_it_is(real_run):
    """Fleet ranks send their RunMeta to rank 0 by pickle."""
    result, _ = real_run
    assert pickle.loads(pickle.dumps(result.meta)) == result.meta


@pytest.mark.parametrize("name", STORED)
def test_every_stored_run_reads(name):
    """The stored files (tests/data: version 1, and host-ddr-v2) read; what they hold
    survives a write of the object."""
    original = json.loads((DATA / name / "system.json").read_text())
    read = RunMeta.from_dict(original)
    assert read.schema_version == original["schema_version"] in (1, 2)
    assert read.run_id == original["run_id"]
    assert read.host is not None and read.host.cpu_model
    _holds(read.as_dict(), original)
    assert RunMeta.from_dict(read.as_dict()) == read


def test_fields_a_version_1_file_predates_are_told_apart_from_recorded_ones():
    old = RunMeta.from_dict(json.loads((DATA / "host-ddr" / "system.json").read_text()))
    assert old.host is not None and old.host.sandbox is None
    assert not old.host.recorded("sandbox") and old.host.recorded("cpu_model")
    assert HOST.recorded("sandbox")  # built here: every field is this version's own


def test_unknown_keys_are_ignored():
    """A newer bwprof's additions do not stop this one reading what it knows."""
    data = {"schema_version": 2, "from_the_future": {"x": [1]},
            "gpus": {"count": 0, "reason": "none", "newer_field": True}}
    read = RunMeta.from_dict(data)
    assert read.gpus == GpusMeta(count=0, reason="none")
    assert "from_the_future" not in read.as_dict()


def test_as_dict_is_strict_json():
    odd = gpu(0, metadata={"power_limit_w": float("nan"), "links": [float("-inf"), 2.5],
                           "cpus": frozenset({3, 1})})
    data = meta(gpus=gpus(odd)).as_dict()
    text = json.dumps(data, allow_nan=False)  # raises on NaN or infinity
    written = json.loads(text)["gpus"]["devices"][0]["metadata"]
    assert written == {"power_limit_w": None, "links": [None, 2.5], "cpus": [1, 3]}


def test_optional_parts_a_run_did_not_reach_stay_out_of_the_file():
    data = meta().as_dict()
    for absent in ("telemetry", "mpi_rank", "close_errors", "findings", "nodes", "mpi"):
        assert absent not in data
    assert data["bwprof_commit"] is None  # recorded as unknown, never left out
    assert "close_errors" in meta(close_errors=("gpu: sticky error",)).as_dict()


def _valid() -> dict[str, Any]:
    return json.loads((DATA / "sim-a" / "system.json").read_text())


def _parent(data: dict[str, Any], path: str) -> tuple[Any, str | int]:
    """The container of dotted `path` (list entries by number) and the key within it."""
    *parents, last = path.split(".")
    target: Any = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    return target, int(last) if isinstance(target, list) else last


def _set(path: str, value: object):
    """A breakage: `value` at `path` of a valid file."""
    def damage(data: dict[str, Any]) -> dict[str, Any]:
        target, key = _parent(data, path)
        target[key] = value
        return data
    return damage


def _drop(path: str):
    def damage(data: dict[str, Any]) -> dict[str, Any]:
        target, key = _parent(data, path)
        del target[key]
        return data
    return damage


MALFORMED = {
    "an object where a list belongs": (_set("command_line", {"a": 1}),
                                       "command_line should be a list, not object"),
    "a list where an object belongs": (_set("gpus", [1, 2]), "gpus should be an object, not list"),
    "a string where an object belongs": (
        _set("gpus.devices.0.properties", "oops"),
        "gpus.devices[0].properties should be an object, not str"),
    "a string where a number belongs": (_set("host.logical_cpus", "2"),
                                        "host.logical_cpus should be an integer, not str"),
    "a number where a string belongs": (_set("run_id", 7), "run_id should be a string, not int"),
    "a boolean where a number belongs": (_set("gpus.count", True),
                                         "gpus.count should be an integer, not bool"),
    "a float where an integer belongs": (_set("plan.repeats", 2.5),
                                         "plan.repeats should be an integer, not float"),
    "a negative count": (_set("gpus.count", -2), "gpus.count should be 0 or more, not -2"),
    "a negative size in a list": (_set("plan.transfer_sizes.1", -1),
                                  "plan.transfer_sizes[1] should be 0 or more, not -1"),
    "a non-finite figure": (_set("gpus.devices.1.peak_hbm_gbps", float("inf")),
                            "gpus.devices[1].peak_hbm_gbps should be a finite number, not inf"),
    "an integer past any double": (  # math.isfinite raised OverflowError for it
        _set("gpus.devices.1.peak_hbm_gbps", 10**400),
        "gpus.devices[1].peak_hbm_gbps should be a finite number, not an integer of 1329 bits"),
    "a required part missing": (_drop("gpus.devices.0.properties.name"),
                                "gpus.devices[0].properties.name is missing"),
    "a compute capability of one number": (
        _set("gpus.devices.0.properties.compute_capability", [9]),
        "gpus.devices[0].properties.compute_capability should be a list of 2, not of 1"),
    "a list entry of the wrong kind": (_set("host.caches.2", "L3"),
                                       "host.caches[2] should be an object, not str"),
    "a package version not a string": (_set("host.packages.numpy", 2),
                                       "host.packages.numpy should be a string, not int"),
    "a nested node's part": (_set("nodes", {"n1": {"gpus": {"devices": [1]}}}),
                             "nodes.n1.gpus.devices[0] should be an object, not int"),
    "an idle check not a list": (_set("telemetry", {"idle_check": 5}),
                                 "telemetry.idle_check should be a list, not int"),
    "a rank without its status": (_set("mpi", {"size": 1, "timeout_s": 1, "ranks": [{"rank": 0}]}),
                                  "mpi.ranks[0].status is missing"),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_each_kind_of_malformation_is_one_line_naming_its_path(kind):
    damage, message = MALFORMED[kind]
    with pytest.raises(MetaError) as caught:
        RunMeta.from_dict(damage(_valid()))
    assert str(caught.value) == message


def test_the_top_level_must_be_an_object():
    with pytest.raises(MetaError, match=r"^the top level should be an object, not list$"):
        RunMeta.from_dict([1])


def test_the_dict_view_refuses_changes_but_copies_freely():
    view = read_only({"gpus": {"devices": [{"index": 0}]}, "interrupted": False})
    for change in (lambda: view.__setitem__("interrupted", True),
                   lambda: view["gpus"].update(count=1), lambda: view.pop("gpus"),
                   lambda: view["gpus"]["devices"][0].setdefault("x", 1), view.clear):
        with pytest.raises(TypeError, match="read-only view of RunMeta"):
            change()
    assert json.loads(json.dumps(view)) == view
    mine = copy.deepcopy(view)
    mine["gpus"]["count"] = 1  # a copy is a plain dict
    assert type(mine) is dict and "count" not in view["gpus"]
    assert type(pickle.loads(pickle.dumps(view))) is dict


def test_commits_as_people_read_them():
    sha = "71732cb8449a37c58d942a466c4ac1d7922ad524"
    assert short_commit(sha) == "71732cb8449a"
    assert short_commit(f"{sha}-dirty") == "71732cb8449a-dirty"
    assert version_text("0.1.0", f"{sha}-dirty") == "0.1.0 (commit 71732cb8449a-dirty)"
    assert version_text("0.1.0", None) == "0.1.0" and version_text(None, None) == "?"
    assert meta(bwprof_version="0.1.0", bwprof_commit=sha).bwprof_text == (
        "0.1.0 (commit 71732cb8449a)")
