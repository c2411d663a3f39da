"""User paths: `~` expanded once, absolute, and names the file system cannot hold refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bwprof.errors import BwprofError
from bwprof.paths import user_path


def test_a_leading_tilde_is_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert user_path("~/x", "--out") == tmp_path / "x"


def test_a_tilde_inside_a_relative_path_stays_a_name(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    assert user_path("./~/x", "--out") == tmp_path / "~" / "x"
    assert user_path("a/~b", "--out") == tmp_path / "a" / "~b"


def test_environment_variables_are_not_expanded(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SOMEWHERE", "/etc")
    assert user_path("$SOMEWHERE/x", "--out") == tmp_path / "$SOMEWHERE" / "x"


def test_the_path_is_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert user_path(Path("r1"), "--out") == tmp_path / "r1"


@pytest.mark.parametrize("raw, words", [
    ("", "is empty"),
    ("a\0b", "NUL"),
    ("a" * 256, "256 bytes"),
    ("ok/" + "é" * 128, "256 bytes"),
    ("/".join(["d" * 200] * 21), "bytes long"),
])
def test_names_the_file_system_cannot_hold_are_one_line_errors(raw, words):
    with pytest.raises(BwprofError, match=words) as caught:
        user_path(raw, "--out")
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("--out")


def test_a_name_of_exactly_name_max_bytes_is_accepted(tmp_path):
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    assert user_path(tmp_path / ("a" * limit), "--out").name == "a" * limit


def test_a_non_utf8_name_is_kept_byte_for_byte(tmp_path):
    name = os.fsdecode(b"run-\xff")
    path = user_path(tmp_path / name, "RUN_DIR")
    assert os.fsencode(path.name) == b"run-\xff"


def test_a_relative_path_in_a_deleted_current_folder_is_one_line(monkeypatch, tmp_path):
    """os.getcwd() of a folder deleted under the shell raises FileNotFoundError: it was a
    traceback from every command given a relative path (or run's default reports/...)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(BwprofError, match=r"^--out 'x' is relative to the current folder, "
                                          r"which no longer exists .*; give an absolute path"):
        user_path("x", "--out")
    assert user_path(str(tmp_path / "y"), "--out") == tmp_path / "y"  # absolute: unaffected


# Catches (issue 37): with HOME unset (and no home in the password database, as for a
# container's uid), `--out ~/x` wrote into a folder literally named `~`
def test_a_tilde_without_a_home_is_one_line_naming_home(monkeypatch, tmp_path):
    import pwd

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HOME", raising=False)

    def nobody(uid):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", nobody)
    with pytest.raises(BwprofError, match=r"^--out '~/x' starts with ~ but HOME is not set"):
        user_path("~/x", "--out")
    for home, words in (("", "HOME is empty"), ("rel", "HOME is relative")):
        monkeypatch.setenv("HOME", home)
        with pytest.raises(BwprofError, match=f"^--out '~/x' starts with ~ but {words}"):
            user_path("~/x", "--out")
    with pytest.raises(BwprofError, match=r"there is no user 'no-such-user-37'"):
        user_path("~no-such-user-37/x", "--out")
    assert list(tmp_path.iterdir()) == []


def test_a_path_of_the_wrong_type_is_one_line():
    """bwprof.run(out=123): a TypeError from os.fspath before."""
    with pytest.raises(BwprofError, match=r"^out must be a path \(a string or a pathlib.Path\), "
                                          r"got 123$"):
        user_path(123, "out")  # type: ignore[arg-type]
