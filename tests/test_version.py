"""The commit a run records: a checkout's hash (and whether it had changes), else nothing,
and never a failed or hung run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from bwprof import _version
from bwprof._version import git_commit

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@pytest.fixture(autouse=True)
def _fresh():
    git_commit.cache_clear()
    yield
    git_commit.cache_clear()


def _git(root, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """A git work tree holding a `bwprof` package folder, with one commit."""
    root = tmp_path / "checkout"
    (root / "bwprof").mkdir(parents=True)
    (root / "bwprof" / "__init__.py").write_text("x = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root


@needs_git
def test_a_checkout_records_its_commit_and_its_changes(checkout):
    sha = _git(checkout, "rev-parse", "HEAD")
    package = checkout / "bwprof"
    assert git_commit(package) == sha
    (package / "notes.txt").write_text("untracked files are not the code that ran\n")
    git_commit.cache_clear()
    assert git_commit(package) == sha
    (package / "__init__.py").write_text("x = 2\n")
    git_commit.cache_clear()
    assert git_commit(package) == f"{sha}-dirty"


@needs_git
def test_the_environment_cannot_point_git_at_another_repository(checkout, tmp_path,
                                                                monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert git_commit(checkout / "bwprof") == _git(checkout, "--git-dir",
                                                   str(checkout / ".git"), "rev-parse", "HEAD")


@needs_git
def test_no_commit_yet_is_no_commit(tmp_path):
    (tmp_path / "bwprof").mkdir()
    _git(tmp_path, "init", "-q")
    assert git_commit(tmp_path / "bwprof") is None


def test_an_installed_package_has_none_and_starts_no_git(tmp_path, monkeypatch):
    """A wheel's bwprof sits in site-packages, even when that is inside a checkout (a
    virtual environment in the source tree): the checkout's commit is not the code's."""
    site = tmp_path / "repo" / ".venv" / "lib" / "site-packages"
    (site / "bwprof").mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()

    def refuse(*_args, **_kwargs):
        raise AssertionError("git started for an installed package")

    monkeypatch.setattr(subprocess, "run", refuse)
    assert git_commit(site / "bwprof") is None


@needs_git
def test_without_git_there_is_no_commit(checkout, monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert git_commit(checkout / "bwprof") is None


def _fake_git(tmp_path, monkeypatch, script):
    """A `git` first on PATH (the only thing on it) that runs `script`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "git"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


@needs_git
def test_a_git_that_hangs_is_given_up_on(checkout, tmp_path, monkeypatch):
    _fake_git(tmp_path, monkeypatch, "exec sleep 30")
    monkeypatch.setattr(_version, "GIT_TIMEOUT_S", 0.2)
    assert git_commit(checkout / "bwprof") is None


@needs_git
def test_a_git_that_fails_or_talks_nonsense_gives_none(checkout, tmp_path, monkeypatch):
    for script in ("echo 'fatal: detected dubious ownership' >&2; exit 128",
                   "echo '# branch.oid not-a-hash'"):
        _fake_git(tmp_path, monkeypatch, script)
        git_commit.cache_clear()
        assert git_commit(checkout / "bwprof") is None


def test_bwprof_itself_and_a_run_record_the_same_commit():
    import bwprof

    commit = git_commit()
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit)
    result = bwprof.run(cases="ddr_triad", size="1MiB", repeats=2, threads="1")
    assert result.meta.bwprof_commit == commit
    assert result.system["bwprof_commit"] == commit
