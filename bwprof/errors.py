"""The project's own exceptions and the exit codes they stand for; the CLI turns them into
one-line messages and those codes (the README's table lists them)."""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
"""A figure failed validation or raised, or `compare --fail-below` found a regression."""
EXIT_USAGE = 2
"""Bad input: an option, a path or a file that is not what bwprof needs; nothing measured."""
EXIT_OUTPUT = 3
"""bwprof could not write its output (disk full, read-only or vanished folder, I/O error);
every row written before the failure is kept and readable."""
EXIT_INTERRUPTED = 130
"""Ctrl-C, SIGTERM, SIGHUP or SIGQUIT stopped the command; a run keeps its finished rows."""


class BwprofError(Exception):
    """Bad input or an environment problem the user can fix; the message says what to do."""

    exit_code = EXIT_USAGE


class OutputError(BwprofError):
    """A file bwprof had to write could not be written (ENOSPC, EROFS, EIO...): the message
    names the file and, for a full disk, the space left; exit code EXIT_OUTPUT."""

    exit_code = EXIT_OUTPUT


class RunInterrupted(KeyboardInterrupt):
    """A stop signal arrived during a run; `result` holds every row finished before it."""

    def __init__(self, result: Any) -> None:
        super().__init__("run interrupted")
        self.result = result
