"""Helpers for the tests of writing under faults (tests/test_write_faults.py,
tests/render/test_outputs.py): storage that refuses writes, and the exit code of this
checkout's CLI for an OutputError."""

from __future__ import annotations

import builtins
import errno
import os
import subprocess
from pathlib import Path

import pytest


def read_only(monkeypatch, folder: Path) -> None:
    """Every file bwprof opens for writing under `folder` fails as on read-only storage."""
    from bwprof.store import atomic, export

    def refusing_open(path, mode="r", *args, **kwargs):
        if folder in Path(path).parents and any(m in mode for m in "wax+"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return builtins.open(path, mode, *args, **kwargs)

    for module in (export, atomic):  # the row files, and every whole file
        monkeypatch.setattr(module, "open", refusing_open, raising=False)


def mount_tmpfs(folder: Path, size: str) -> None:
    """A real tmpfs at `folder`; skips the test where this machine cannot mount one."""
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount): "
                    f"{mounted.stderr.strip() or mounted.returncode}")


def read_only_folder(folder: Path) -> None:
    """Make `folder` refuse writes for this process: a read-only bind mount of itself where
    running as root (root ignores the permission bits), else chmod 555. Undo with
    `writable_again`; skips the test where root cannot mount."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return
    for command in (["mount", "--bind", str(folder), str(folder)],
                    ["mount", "-o", "remount,bind,ro", str(folder)]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            unmount(folder)
            pytest.skip(f"cannot bind-mount a folder read-only here: "
                        f"{done.stderr.strip() or done.returncode}")


def writable_again(folder: Path) -> None:
    """Undo `read_only_folder`."""
    if os.geteuid() == 0:
        unmount(folder)
    else:
        folder.chmod(0o755)


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)
