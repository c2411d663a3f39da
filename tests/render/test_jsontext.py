"""bwprof.render.jsontext writes exactly `json.dumps(x, indent=2)`: generated documents
(nested containers, tables with odd rows, unicode, control characters, extreme floats, keys
that need escaping or converting) and the CLI's own --json documents of every stored run."""

from __future__ import annotations

import errno
import io
import json
import math
import random
import string
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.render import jsontext
from bwprof.render.jsontext import echo_json, json_text
from bwprof.store.formats import JsonRows

DATA = Path(__file__).resolve().parents[1] / "data"
FOLDERS = sorted(str(path) for path in DATA.iterdir() if (path / "results.csv").exists())

_TEXT = (string.printable + "\x00\x01\x1f\x7f\x80\u00e9\u00b7\u2028\u2029\ud800\udfff"
         "\U0001f600\"\\/:{}[],\n" + "\x00{" + ":\x00[")


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_TEXT) for _ in range(rng.choice((0, 1, 3, 12))))


def _float(rng: random.Random) -> float:
    return rng.choice((0.0, -0.0, 1.5, 1e308, -1e308, 5e-324, 1e-7, 1e16, 0.1 + 0.2,
                       float("nan"), math.inf, -math.inf, rng.uniform(-1e6, 1e6),
                       rng.random() * 10 ** rng.randint(-300, 300)))


def _scalar(rng: random.Random) -> object:
    kind = rng.randrange(7)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return rng.choice((0, -1, 7, 2 ** 70, -(2 ** 64)))
    if kind == 2:
        return _float(rng)
    return (True, False, None, _text(rng))[kind - 3]


def _key(rng: random.Random) -> object:
    return rng.choice((_text(rng), _text(rng), rng.randint(-5, 5), _float(rng), True, False,
                       None))


def _row(rng: random.Random, keys: list[str]) -> dict[object, object]:
    return {key: _scalar(rng) for key in keys}


def _value(rng: random.Random, depth: int) -> object:
    kind = rng.randrange(8) if depth < 4 else 0
    if kind <= 2:
        return _scalar(rng)
    if kind == 3:  # a list of scalars, sometimes longer than a slice
        return [_scalar(rng) for _ in range(rng.choice((0, 1, 5, jsontext.SLICE + 3)))]
    if kind == 4:  # a table: flat rows, now and then an empty or nested row or a non-dict
        keys = [_text(rng) for _ in range(rng.randint(1, 6))]
        rows: list[object] = [_row(rng, keys)
                              for _ in range(rng.choice((0, 1, 2, 40, jsontext.SLICE + 1)))]
        if rows and rng.random() < 0.3:  # rows of other keys, or the same in another order
            rows[rng.randrange(len(rows))] = rng.choice((
                _row(rng, keys[::-1]), _row(rng, keys[1:] or ["other"]),
                {**_row(rng, keys), rng.choice((1, None, 2.5, "\u00e9")): 0}))
        if rows and rng.random() < 0.5:
            odd = rng.choice(({}, {"x": []}, {"x": {}}, {"x": [1, {"y": None}]}, [], 3, "s"))
            rows.insert(rng.randrange(len(rows)), odd)
        return rows if rng.random() < 0.8 else tuple(rows)
    if kind == 5:
        return {_key(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 6))}
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {_key(rng): _scalar(rng) for _ in range(rng.choice((0, 1, 4, jsontext.SLICE + 2)))}


@pytest.mark.parametrize("seed", range(300))
def test_generated_documents_match_dumps(seed):
    value = _value(random.Random(seed), 0)
    assert json_text(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("indent", [0, 1, 4])
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_other_indents_and_unicode_output_match_dumps(indent, ensure_ascii):
    for seed in range(40):
        value = _value(random.Random(1000 + seed), 0)
        assert json_text(value, indent=indent, ensure_ascii=ensure_ascii) == \
            json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


@pytest.mark.parametrize("value", [
    [], {}, "", 0, None, True, 1e308, float("nan"), [[]], [{}], {"": {}}, [[], {}, [[]]],
    [{"a": 1}, {}], [{}, {"a": 1}], [{"a": {}}], [{"a": []}, {"b": 1}], ({"a": 1},),
    {2: 1, 1.5: 2, True: 3, False: 6, None: 4, "k\n\"": 5}, {float("inf"): 1, -0.0: [1, 2]},
    [{"a": "}\n{"}, {"b": ':\x00['}], [{"\n\"": 1}], [{"a": 1}, [1]], [1, [2], {"c": 3}],
])
def test_edge_cases_match_dumps(value):
    assert json_text(value) == json.dumps(value, indent=2)


def test_what_dumps_refuses_is_refused_alike():
    loop: list[object] = []
    loop.append(loop)
    row: dict[str, object] = {"a": 1}
    table = [row, {"b": [row]}]
    row["me"] = table
    for value, error, allow_nan in (({"a": object()}, TypeError, True),
                                    ([{"a": object()}], TypeError, True),
                                    ({(1, 2): 1}, TypeError, True),
                                    ([{"a": float("nan")}], ValueError, False),
                                    ({float("inf"): 1}, ValueError, False),
                                    (loop, ValueError, True), (table, ValueError, True)):
        with pytest.raises(error):
            json.dumps(value, indent=2, allow_nan=allow_nan)
        with pytest.raises(error):
            json_text(value, allow_nan=allow_nan)


def test_echo_json_writes_dumps_and_a_newline_in_chunks(monkeypatch):
    monkeypatch.setattr(jsontext, "CHUNK", 1000)
    monkeypatch.setattr(jsontext, "SLICE", 16)
    value = _value(random.Random(7), 0)
    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return super().write(text)

    out = Recorder()
    echo_json({"rows": [{"a": n, "b": "x" * 50} for n in range(500)], "v": value}, out)
    expected = json.dumps({"rows": [{"a": n, "b": "x" * 50} for n in range(500)],
                           "v": value}, indent=2) + "\n"
    assert out.getvalue() == expected
    assert len(writes) > 10 and max(map(len, writes)) < len(expected) / 5


def test_echo_json_stops_at_a_broken_pipe_on_the_guarded_stdout():
    from bwprof.stdio import GuardedStream

    class ClosedPipe(io.StringIO):
        attempts = 0

        def write(self, text: str) -> int:
            self.attempts += 1
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    pipe = ClosedPipe()
    unwritable = object()  # encoding it would raise: the writer must have stopped before
    echo_json({"rows": [{"n": n, "pad": "x" * 100} for n in range(50_000)], "z": unwritable},
              GuardedStream(pipe))
    assert pipe.attempts == 1


def _as_list(value: object) -> object:
    """The documents' tables (`JsonRows`) as the lists of dicts they stand for."""
    if isinstance(value, JsonRows):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _old_echo(value: object, stream: object = None, indent: int = 2) -> None:
    typer.echo(json.dumps(value, indent=indent, default=_as_list))


def _both(monkeypatch, args: list[str]) -> tuple[str, str]:
    runner = CliRunner()
    new = runner.invoke(app, args)
    monkeypatch.setattr(jsontext, "echo_json", _old_echo)
    old = runner.invoke(app, args)
    monkeypatch.undo()
    assert new.exit_code == old.exit_code, (new.output, old.output)
    return new.stdout, old.stdout


@pytest.mark.parametrize("folder", FOLDERS)
def test_report_and_accept_json_of_every_stored_run_are_unchanged(monkeypatch, folder):
    for args in (["report", "--no-plots", "--json", folder],
                 ["report", "--no-plots", "--json", "--rows", folder],
                 ["accept", "--json", folder]):
        new, old = _both(monkeypatch, args)
        assert new == old and new.startswith("{\n") and json.loads(new)


@pytest.mark.parametrize("pair", [("sim-a", "sim-b-slower"), ("sim-a", "sim-c-other-box"),
                                  ("host-ddr", "host-ddr-v2"), ("h200-quick", "sim-a")])
def test_compare_json_of_stored_runs_is_unchanged(monkeypatch, pair):
    args = ["compare", "--json", *(str(DATA / name) for name in pair)]
    new, old = _both(monkeypatch, args)
    assert new == old and json.loads(new)


def test_without_the_c_encoder_it_is_dumps_own_text(monkeypatch):
    monkeypatch.setattr(jsontext, "_MAKE_ENCODER", None)
    value = _value(random.Random(3), 0)
    assert json_text(value) == json.dumps(value, indent=2)
    out = io.StringIO()
    echo_json(value, out)
    assert out.getvalue() == json.dumps(value, indent=2) + "\n"
