"""`Heartbeat` on a rank other than 0 once rank 0 went silent (issue 37: a rank 0 stopped
with SIGSTOP under --mpi-timeout 20 let the others measure the rest of their plans before
they ended: 86 s on a loaded box instead of one timeout)."""

from __future__ import annotations

import pytest

from bwprof.fleet.comm import FleetTimeout
from bwprof.fleet.run import Heartbeat


class _Fleet:
    def __init__(self, rank: int, silent: dict[int, str]) -> None:
        self.rank, self._silent, self.beats = rank, silent, 0

    def silent(self, peer: int) -> str | None:
        return self._silent.get(peer)

    def heartbeat(self) -> None:
        self.beats += 1


class _Listener:
    def __init__(self) -> None:
        self.started: list[object] = []

    def start(self, total, estimate_s=None) -> None: ...

    def job_started(self, job, left_s=None) -> None:
        self.started.append(job)

    def job_finished(self, job, rows) -> None: ...


# Catches: a rank measuring on after a wait gave up on rank 0 (its next step gives up at
# once anyway), so the job ended after the rest of its plan instead of within the timeout
def test_a_rank_stops_measuring_once_rank_0_went_silent():
    fleet, inner = _Fleet(1, {0: "rank 1 waited 20 s for the window from rank 0"}), _Listener()
    with pytest.raises(FleetTimeout, match="rank 1 stopped measuring: rank 0 went silent "
                                           r"\(rank 1 waited 20 s"):
        Heartbeat(fleet, inner).job_started("job")  # type: ignore[arg-type]
    assert inner.started == []


# Catches: the check stopping rank 0 (it merges what the others send) or a rank whose
# silent peer is not rank 0 (net_p2p skips that peer's jobs; the rest still run)
@pytest.mark.parametrize("rank, silent", [(0, {1: "gone"}), (2, {1: "gone"}), (1, {})])
def test_other_ranks_measure_on_and_beat(rank, silent):
    fleet, inner = _Fleet(rank, silent), _Listener()
    Heartbeat(fleet, inner).job_started("job")  # type: ignore[arg-type]
    assert inner.started == ["job"] and fleet.beats == 1
