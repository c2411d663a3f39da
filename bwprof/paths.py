"""Paths the user gives (--out, run folders, --csv), checked and normalised once.

`~` at the start of a path is expanded, environment variables are not (the shell expands
them; a `$` bwprof meets is a character of a name), and the result is absolute: pandas and
matplotlib expand a leading `~` themselves, so a relative path such as `./~/x` (which
pathlib shortens to `~/x`) would otherwise be written to two places. A name the file system
cannot hold (a NUL, a component longer than NAME_MAX bytes, a path longer than PATH_MAX) is
a one-line BwprofError before anything is created.
"""

from __future__ import annotations

import os
from pathlib import Path

from bwprof.coerce import shorten
from bwprof.errors import BwprofError

DEFAULT_NAME_MAX = 255
PATH_MAX = 4096


def _name_max(path: Path) -> int:
    """NAME_MAX of the file system the path lands on (its nearest existing folder)."""
    for folder in (path, *path.parents):
        try:
            if folder.is_dir():
                return int(os.pathconf(folder, "PC_NAME_MAX"))
        except (OSError, ValueError):
            break
    return DEFAULT_NAME_MAX


def _home(text: str, option: str) -> str:
    """`text` with its leading `~` or `~user` expanded; a one-line BwprofError naming HOME
    where it cannot be: with HOME unset and no home in the password database, Python leaves
    the `~` as it is, and the files would go to a folder literally named `~`; an empty or
    relative HOME would put them under / or the current folder."""
    head = text[1:].split(os.sep, 1)[0]
    if not head:
        home = os.environ.get("HOME")
        if home is not None and not os.path.isabs(home):
            raise BwprofError(f"{option} {shorten(text)!r} starts with ~ but HOME is "
                              f"{'empty' if not home else f'relative ({shorten(home)!r})'}; "
                              "set HOME to your home folder or give the path without ~")
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        whose = (f"there is no user {shorten(head)!r}" if head
                 else "HOME is not set and this user has no home in the password database")
        raise BwprofError(f"{option} {shorten(text)!r} starts with ~ but {whose}; set HOME "
                          "or give the path without ~")
    return expanded


def user_path(raw: str | os.PathLike[str], option: str) -> Path:
    """The path `raw` names, absolute, with a leading `~` expanded; `option` names it in
    the error ('--out', 'RUN_DIR')."""
    try:
        text = os.fspath(raw)
    except TypeError:  # bwprof.run(out=123)
        raise BwprofError(f"{option} must be a path (a string or a pathlib.Path), got "
                          f"{shorten(repr(raw))}") from None
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text:
        raise BwprofError(f"{option} is empty; give a path")
    if "\0" in text:
        raise BwprofError(f"{option} holds a NUL character, which no path can; give another")
    if text.startswith("~"):
        text = _home(text, option)
    try:
        path = Path(text).absolute()
    except FileNotFoundError:  # os.getcwd() of a folder that was deleted under the shell
        raise BwprofError(f"{option} {shorten(text)!r} is relative to the current folder, "
                          "which no longer exists (deleted since the shell entered it); "
                          "give an absolute path, or cd to a folder that exists") from None
    encoded = os.fsencode(str(path))
    if len(encoded) >= PATH_MAX:
        raise BwprofError(f"{option} is {len(encoded)} bytes long once absolute; the file "
                          f"system allows {PATH_MAX - 1}: give a shorter path")
    limit = _name_max(path)
    for part in path.parts[1:]:
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 40 else part[:37] + "..."
            raise BwprofError(f"{option}: the name {shown!r} is {size} bytes; the file system "
                              f"allows {limit} per name: give a shorter one")
    return path
