"""The GPUs a rank of an MPI launch holds on its node: one rule shared by the fleet run
(`bwprof.fleet.run`) and the availability answer a rank gives before it
(`bwprof.availability`), so `bwprof list` inside a launch says what the run would use."""

from __future__ import annotations


def gpu_share(local_rank: int, local_size: int, count: int) -> list[int] | None:
    """Several ranks on a node: each its local rank's GPU. One rank on a node: every GPU
    (None)."""
    if local_size <= 1:
        return None
    return [local_rank % count] if count else []
