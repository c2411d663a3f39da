"""Overwrite device buffers between timing and validation: shared by the simulated-backend
test (CI) and the real-GPU test, so the real one cannot drift from the code it patches."""

from __future__ import annotations

from bwprof.gpu import hbm, sampling, transfers
from bwprof.gpu.devices import describe
from bwprof.gpu.executor import GpuExecutor
from bwprof.plan import make_plan
from bwprof.runner import RunContext, Runner
from bwprof.schema.rows import ResultRow


def rows_with_results_corrupted(backend, monkeypatch) -> list[ResultRow]:
    """`h2d_pinned` and `hbm_triad` on the first GPU, the start of every device buffer zeroed
    after each row's timing (`take_samples`) and before its validation."""
    executor = GpuExecutor(backend, describe(backend)[:1])
    real_take_samples = sampling.take_samples

    def take_samples_then_corrupt(gpu, *args, **kwargs):
        sampled = real_take_samples(gpu, *args, **kwargs)
        for key, array in executor.pool._arrays.items():
            if key[0] == "device":
                gpu.zero(array, 4096)
        return sampled

    monkeypatch.setattr(transfers, "take_samples", take_samples_then_corrupt)
    monkeypatch.setattr(hbm, "take_samples", take_samples_then_corrupt)
    plan = make_plan(cases="h2d_pinned,hbm_triad", preset="quick", repeats=2, usable_cpus=1,
                     llc_bytes=None, memory_available_bytes=None)
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    try:
        return runner.run()
    finally:
        runner.close()
