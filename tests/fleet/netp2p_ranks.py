"""net_p2p's jobs over a real MPI job, at one tiny size, as a fleet run's ranks run them:
`mpirun -n N python -m tests.fleet.netp2p_ranks SEED [--all-pairs] [--stop RANK:PEER]`.
Rank 0 prints, as JSON, the pairs the executor chose and every row the ranks made ({sender,
receiver, rank that made it, note}), and what each rank's jobs with a stopped rank came to.
Used by tests/fleet/test_mpirun.py: `bwprof run` sweeps the preset's transfer sizes up to
256 MiB, too much for a test of which pairs run on a shared CPU.

`--stop RANK:PEER`: RANK is stopped (as by SIGTERM) in its first job with PEER, once rank 0
gave both ends the go-ahead: it says so as its signal handler would (`announce_stop`) and
takes no part in any job after; the other ranks run on.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

from bwprof.cases import get_case
from bwprof.fleet.comm import Fleet, FleetTimeout
from bwprof.fleet.netp2p import GO, NetP2PExecutor
from bwprof.measurement import NotRun
from bwprof.plan import make_plan
from bwprof.units import KiB

TIMEOUT_S = 60.0
"""The ranks' --mpi-timeout: a stopped rank's peer must not wait it out."""


def main(seed: str, all_pairs: bool, stop: tuple[int, int] | None) -> None:
    fleet = Fleet.join(TIMEOUT_S)
    hosts = fleet.comm.allgather(fleet.host)
    executor = NetP2PExecutor(fleet, [0] * fleet.size, (False, "test"), hosts=hosts,
                              seed=seed, all_pairs=all_pairs)
    plan = replace(make_plan(cases="net_p2p", preset="quick", repeats=2, usable_cpus=1,
                             llc_bytes=None, memory_available_bytes=None, fleet=True),
                   transfer_sizes=(64 * KiB,))
    case = get_case("net_p2p")
    rows, outcomes = [], []
    for job in executor.jobs(case, plan):
        assert job.ranks is not None
        if stop is not None and fleet.rank == stop[0] and stop[1] in job.ranks:
            if job.memory == "host":  # its go-ahead, then its signal, while its peer waits
                fleet.wait(fleet.comm.irecv(source=0, tag=executor._tags[job] + GO), "go", 0)
                time.sleep(0.5)
                fleet.announce_stop("SIGTERM")
            break
        started = time.monotonic()
        try:
            measured = executor.measure(case, job, plan)
            outcome = f"{len(measured)} row(s)"
        except NotRun as exc:
            measured, outcome = [], f"{exc.status}: {exc.reason}"
        except (RuntimeError, FleetTimeout) as exc:
            measured, outcome = [], f"{type(exc).__name__}: {exc}"
        if stop is not None and stop[0] in job.ranks and job.memory == "host":
            outcomes.append({"rank": fleet.rank, "pair": job.ranks, "outcome": outcome,
                             "seconds": time.monotonic() - started})
        rows += [{"sender": job.ranks[0], "receiver": job.ranks[1], "made_by": fleet.rank,
                  "valid": m.valid, "note": m.note} for m in measured]
    everyone = fleet.comm.gather((rows, outcomes), root=0)
    if fleet.rank == 0:
        print(json.dumps({"pairs": executor.pairs.pairs, "reasons": executor.pairs.reasons,
                          "note": executor.pairs.note,
                          "rows": [row for part, _ in everyone for row in part],
                          "outcomes": [o for _, part in everyone for o in part]}))


if __name__ == "__main__":
    arguments = sys.argv[2:]
    stopped = (tuple(int(r) for r in arguments[arguments.index("--stop") + 1].split(":"))
               if "--stop" in arguments else None)
    main(sys.argv[1], "--all-pairs" in arguments, stopped)  # type: ignore[arg-type]
