"""net_p2p's jobs over a real MPI job, at one tiny size, as a fleet run's ranks run them:
`mpirun -n N python -m tests.fleet.netp2p_ranks SEED [--all-pairs]`. Rank 0 prints, as JSON,
the pairs the executor chose and every row the ranks made ({sender, receiver, rank that
made it, note}). Used by tests/fleet/test_mpirun.py: `bwprof run` sweeps the preset's
transfer sizes up to 256 MiB, too much for a test of which pairs run on a shared CPU.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from bwprof.cases import get_case
from bwprof.fleet.comm import Fleet
from bwprof.fleet.netp2p import NetP2PExecutor
from bwprof.measurement import NotRun
from bwprof.plan import make_plan
from bwprof.units import KiB


def main(seed: str, all_pairs: bool) -> None:
    fleet = Fleet.join(120.0)
    hosts = fleet.comm.allgather(fleet.host)
    executor = NetP2PExecutor(fleet, [0] * fleet.size, (False, "test"), hosts=hosts,
                              seed=seed, all_pairs=all_pairs)
    plan = replace(make_plan(cases="net_p2p", preset="quick", repeats=2, usable_cpus=1,
                             llc_bytes=None, memory_available_bytes=None, fleet=True),
                   transfer_sizes=(64 * KiB,))
    case = get_case("net_p2p")
    rows = []
    for job in executor.jobs(case, plan):
        try:
            measured = executor.measure(case, job, plan)
        except NotRun:
            continue  # the GPU-buffer jobs: no GPU here
        assert job.ranks is not None
        rows += [{"sender": job.ranks[0], "receiver": job.ranks[1], "made_by": fleet.rank,
                  "valid": m.valid, "note": m.note} for m in measured]
    everyone = fleet.comm.gather(rows, root=0)
    if fleet.rank == 0:
        print(json.dumps({"pairs": executor.pairs.pairs, "reasons": executor.pairs.reasons,
                          "note": executor.pairs.note,
                          "rows": [row for part in everyone for row in part]}))


if __name__ == "__main__":
    main(sys.argv[1], "--all-pairs" in sys.argv[2:])
