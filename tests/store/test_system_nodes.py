"""A fleet's system.json read with each node's text parsed once where it repeats
(`runfolder._fleet_system`, issue 36): what `read_json` parses, to each value's kind, or
nothing (and `read_json` reads the file, refusing it in its own words)."""

from __future__ import annotations

import json
import marshal
import random
from pathlib import Path

import pytest

from bwprof.errors import BwprofError
from bwprof.schema.reading import read_json
from bwprof.store import runfolder
from tests.schema.test_meta_outcomes import full


def _fleet_text(nodes: int = 4, indent: int | None = 2) -> str:
    data = full()
    node = data["nodes"]["n1"]
    data["nodes"] = {f"n{i}": json.loads(json.dumps(node)) for i in range(nodes)}
    data["nodes"]["n2"]["host"]["hostname"] = "other"  # a node unlike the one before it
    return json.dumps(data, indent=indent)


def _outcome(read, path: Path) -> tuple[str, object]:
    try:
        return "read", marshal.dumps(read(path), 2)  # kinds and key order: 1 is not 1.0
    except BwprofError as exc:
        return "refused", str(exc)


def _read_system_json(path: Path) -> object:
    parsed = runfolder._fleet_system(path)  # type: ignore[attr-defined]
    return read_json(path, strict=True) if parsed is None else parsed


@pytest.mark.parametrize("indent", [None, 2])
def test_a_fleet_file_is_parsed_once_a_node_as_read_json_parses_it(tmp_path, indent):
    path = tmp_path / "system.json"
    path.write_text(_fleet_text(indent=indent))
    parsed = runfolder._fleet_system(path)  # type: ignore[attr-defined]
    assert parsed is not None  # the fast way was taken
    assert marshal.dumps(parsed, 2) == marshal.dumps(read_json(path, strict=True), 2)
    assert parsed["nodes"]["n0"] is parsed["nodes"]["n1"]  # one parse of the same text


PIECES = ['"nodes"', '"nodes": {}', "{", "}", "[", "]", ",", ":", '"', "\\", "\\u00e9",
          "\\ud800", "NaN", "Infinity", "1", "1.0", "true", "null", " ", "\n", "\ufeff",
          "\u00e9", "\x00", '"n1": {}', "e5", "-"]


def test_every_damage_reads_or_is_refused_as_read_json_has_it(tmp_path):
    """Random cuts, insertions and doubled spans of a fleet file: the fast way gives what
    read_json gives, or leaves the file to read_json."""
    text = _fleet_text(nodes=3)
    rng = random.Random(36)
    path = tmp_path / "system.json"
    fast, differ = 0, []
    for case in range(1500):
        damaged = text
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(len(damaged))
            kind = rng.random()
            if kind < 0.3:
                damaged = damaged[:at] + damaged[at + rng.randint(1, 40):]
            elif kind < 0.8:
                damaged = damaged[:at] + rng.choice(PIECES) + damaged[at:]
            else:
                span = damaged[at:at + rng.randint(1, 400)]
                damaged = damaged[:at] + span + damaged[at:]
        path.write_text(damaged, encoding="utf-8", errors="surrogatepass")
        ours = _outcome(_read_system_json, path)
        theirs = _outcome(lambda p: read_json(p, strict=True), path)
        fast += runfolder._fleet_system(path) is not None  # type: ignore[attr-defined]
        if ours != theirs:
            differ.append(f"case {case}: {ours[0]} where read_json {theirs[0]}")
    assert not differ, "\n".join(differ[:10])
    assert fast > 100  # damage that leaves it JSON (a node's value changed) was read fast


def test_a_second_nodes_key_or_a_nested_one_is_left_to_read_json(tmp_path):
    path = tmp_path / "system.json"
    data = json.loads(_fleet_text())
    data["plan"]["nodes"] = {"x": 1}
    path.write_text(json.dumps(data))
    assert runfolder._fleet_system(path) is None  # type: ignore[attr-defined]
    nested = {key: value for key, value in data.items() if key != "nodes"}
    nested["plan"]["nodes"] = {"x": {}}
    path.write_text(json.dumps(nested))
    assert runfolder._fleet_system(path) is None  # type: ignore[attr-defined]
    assert "nodes" not in read_json(path)  # type: ignore[operator]
