"""Helpers shared by the fleet tests."""

from __future__ import annotations

import threading
from collections.abc import Callable

from bwprof.fleet.comm import FleetTimeout


def gives_up(wait: Callable[[], object], guard_s: float = 60.0) -> list[str]:
    """The FleetTimeout messages `wait` (a fleet step that should give up) ends with, run in
    a thread so a step that never gives up fails the test after `guard_s` instead of
    hanging it."""
    outcome: list[str] = []

    def run() -> None:
        try:
            wait()
        except FleetTimeout as exc:
            outcome.append(str(exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=guard_s)
    assert not worker.is_alive(), "the fleet step never timed out"
    return outcome
