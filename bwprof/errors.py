"""The project's own exceptions; the CLI turns them into one-line messages and exit codes."""

from __future__ import annotations

from typing import Any


class BwprofError(Exception):
    """Bad input or an environment problem the user can fix; the message says what to do."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM arrived during a run; `result` holds every row finished before it."""

    def __init__(self, result: Any) -> None:
        super().__init__("run interrupted")
        self.result = result
