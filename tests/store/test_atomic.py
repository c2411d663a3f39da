"""Whole files written inside the folder they were meant for: never through a link planted at
the file's name, its temporary file's name, or in place of its folder meanwhile (issue 37:
a run folder is untrusted input)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bwprof.errors import OutputError
from bwprof.store import atomic
from bwprof.store.atomic import atomic_file, publish_new, write_json_atomic


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's")
    return victim


def test_a_link_at_the_target_is_replaced_never_written_through(tmp_path):
    folder, victim = tmp_path / "out", _victim(tmp_path)
    folder.mkdir()
    (folder / "summary.csv").symlink_to(victim)
    with atomic_file(folder / "summary.csv") as handle:
        handle.write("mine\n")
    assert victim.read_text() == "someone else's"
    assert not (folder / "summary.csv").is_symlink()
    assert (folder / "summary.csv").read_text() == "mine\n"


def test_a_link_planted_at_the_temporary_name_is_refused(tmp_path, monkeypatch):
    folder, victim = tmp_path / "out", _victim(tmp_path)
    folder.mkdir()
    monkeypatch.setattr(atomic, "temporary_suffix", lambda: "bwprof-1-00000000.tmp")
    (folder / ".system.json.bwprof-1-00000000.tmp").symlink_to(victim)
    with pytest.raises(OutputError, match=r"^cannot write .*system\.json: "):
        write_json_atomic(folder / "system.json", {"run": "mine"})
    with pytest.raises(OutputError):
        publish_new(folder / "system.json", lambda handle: handle.write(b"mine"))
    assert victim.read_text() == "someone else's"
    assert not (folder / "system.json").exists()


def test_the_file_lands_in_the_folder_opened_even_if_a_link_replaces_it(tmp_path):
    """The folder is swapped for a link to another while the file is being written: the
    rename happens in the folder that was opened, never in the link's target."""
    folder, elsewhere = tmp_path / "report", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    with atomic_file(folder / "summary.csv") as handle:
        handle.write("mine\n")
        folder.rename(tmp_path / "moved")
        folder.symlink_to(elsewhere)
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "moved" / "summary.csv").read_text() == "mine\n"
    assert [p.name for p in (tmp_path / "moved").iterdir()] == ["summary.csv"]


def test_publish_new_never_writes_through_a_link_at_its_name(tmp_path):
    folder, victim = tmp_path / "store", _victim(tmp_path)
    folder.mkdir()
    (folder / "runs-x.parquet").symlink_to(victim)
    assert publish_new(folder / "runs-x.parquet", lambda handle: handle.write(b"mine")) is False
    assert victim.read_text() == "someone else's"
    assert os.listdir(folder) == ["runs-x.parquet"]  # no temporary file left
