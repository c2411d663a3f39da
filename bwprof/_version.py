"""bwprof's version, and the git commit it runs from when that is a checkout.

Two checkouts of one version number may be different code, so a run records its commit
(system.json's `bwprof_commit`) and `compare` warns when two runs' commits differ.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__version__ = "0.2.0"

PACKAGE_DIR = Path(__file__).resolve().parent
GIT_TIMEOUT_S = 2.0
"""At most this long for git to answer: a slow filesystem or a huge tree must not hold a run."""


@functools.lru_cache(maxsize=8)
def git_commit(package: Path = PACKAGE_DIR) -> str | None:
    """The commit of the git work tree whose top folder holds `package` (bwprof's own
    folder by default): its full hash, with `-dirty` appended where tracked files differ from
    it. None when installed from a wheel or sdist (no `.git` beside the package, so git is
    not even started), where git is missing, refuses the tree (another user's, unsafe), fails
    or does not answer within GIT_TIMEOUT_S. Never raises."""
    import subprocess

    root = package.parent
    if not (root / ".git").exists():  # a folder or, in a worktree or submodule, a file
        return None
    env = {key: value for key, value in os.environ.items()
           if key not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}  # this tree, no other
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")  # read-only
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain=v2", "--branch",
             "--untracked-files=no"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT_S, env=env,
            stdin=subprocess.DEVNULL, check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if done.returncode != 0:
        return None
    sha, dirty = None, False
    for line in done.stdout.splitlines():
        if line.startswith("# branch.oid "):
            sha = line.removeprefix("# branch.oid ").strip()
        elif line and not line.startswith("#"):
            dirty = True  # a changed, staged or conflicted tracked file
    if not sha or not all(c in "0123456789abcdef" for c in sha):  # '(initial)': no commit yet
        return None
    return f"{sha}-dirty" if dirty else sha
