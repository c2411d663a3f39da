"""Whether each case can run on this machine, without measuring (`bwprof list`).

Told from cheap facts where they settle it: the host's facts (sysfs, this process's CPUs), an
MPI launch's environment, and whether the machine has an NVIDIA driver at all. Only where a
driver is present are CuPy, Numba and NVML loaded to count and describe the GPUs (the GPU
executor's own answer); without one the answer is the GPU probe's, without importing them:
`bwprof list` stays well under a second on a machine without a GPU.

Inside an MPI launch (mpirun or srun started `bwprof list` as one of several ranks) the
answer is what `bwprof run` there would do: the MPI cases run (where mpi4py is installed),
and a rank that shares its node with others holds one GPU of it, as a fleet run's rank does
(the cases needing every GPU of the node, or two GPUs, are waived). The launch itself is
told by the caller (`bwprof.fleet.comm`'s reading of the launcher's variables), without
loading MPI.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bwprof.casespec import CaseSpec
from bwprof.gpushare import gpu_share

if TYPE_CHECKING:
    from bwprof.executor import Executor

NO_MPI_REASON = "needs an MPI launch of 2 ranks or more: mpirun -n 2 bwprof run --mpi (or srun)"
NO_MPI4PY_REASON = ("needs mpi4py in this MPI launch: pip install 'bwprof[mpi]' (and an MPI "
                    "library)")
DRIVER_PROC = "/proc/driver/nvidia"
"""The NVIDIA kernel driver's folder: present wherever the driver is loaded."""
DRIVER_LIBRARY = "libcuda.so.1"
"""The CUDA driver library CuPy and Numba load: a container given the GPU has it even where
/proc/driver/nvidia is hidden."""


def has_nvidia_driver() -> bool:
    """Whether this machine may have an NVIDIA GPU: the kernel driver's folder or the CUDA
    driver library. False only where neither is there (then no GPU can be found)."""
    if os.path.exists(DRIVER_PROC):
        return True
    try:
        ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return False
    return True


def _no_driver_reason() -> str:
    """What the GPU probe (`bwprof.gpu.runtime.probe`) says on a machine without a driver."""
    from bwprof.gpu.runtime import NO_GPU_REASON

    if importlib.util.find_spec("cupy") is None:
        return f"{NO_GPU_REASON} (CuPy is not installed)"
    return NO_GPU_REASON


def _host_reasons(cases: Sequence[CaseSpec]) -> dict[str, str | None]:
    """The host executor's answers (`HostExecutor.unavailable_reason`), from the same facts
    it is built with (`bwprof.api.host_executor`), without loading its Numba kernels."""
    from bwprof.host.cases import HostCase
    from bwprof.host.facts import HostFacts, allowed_cpus, measurable_nodes
    from bwprof.system import host_info

    host = host_info()
    facts = HostFacts(host.cpu_model, tuple(host.caches), host.cache_source,
                      host.llc_bytes_total, tuple(measurable_nodes(host.numa_nodes, None)),
                      allowed_cpus(), host.memory_available_bytes, host.memory_total_bytes)
    reasons: dict[str, str | None] = {}
    for case in cases:
        why = (case.unavailable(case, facts)
               if isinstance(case, HostCase) and case.unavailable is not None else None)
        reasons[case.key] = None if why is None else why.reason
    return reasons


def _gpu_count() -> int:
    from bwprof.gpu.runtime import probe

    return probe().count


def _gpu_executor(only: list[int] | None) -> Executor:
    from bwprof.api import gpu_executor

    return gpu_executor(only=only)[0]


def _gpu_reasons(cases: Sequence[CaseSpec], local: tuple[int, int] | None = None
                 ) -> dict[str, str | None]:
    """The GPU executor's answers: from the probe's reason without a driver, else from the
    executor itself (it counts and describes the GPUs), holding the GPU a fleet rank would
    where `local` (local rank, ranks on the node) has several ranks on the node."""
    if not has_nvidia_driver():
        reason = _no_driver_reason()
        return {case.key: reason for case in cases}
    # The GPU count is probed only where several ranks share the node.
    share = (gpu_share(local[0], local[1], _gpu_count())
             if local is not None and local[1] > 1 else None)
    executor = _gpu_executor(share)
    try:
        reasons: dict[str, str | None] = {}
        for case in cases:
            why = executor.unavailable_reason(case)
            reasons[case.key] = None if why is None else why.reason
        return reasons
    finally:
        executor.close()


def _mpi_reason(ranks: int | None) -> str | None:
    """Why the MPI cases cannot run: no launch of 2 ranks or more, or no mpi4py to run them."""
    if ranks is None or ranks < 2:
        return NO_MPI_REASON
    return None if importlib.util.find_spec("mpi4py") is not None else NO_MPI4PY_REASON


def case_availability(cases: Sequence[CaseSpec], ranks: int | None = None,
                      local: tuple[int, int] | None = None) -> dict[str, str | None]:
    """Why each case cannot run on this machine (None where it can), without measuring, in
    the order of `cases`. Inside an MPI launch, `ranks` (how many) and `local` (this rank's
    place among the ranks on its node, and their number) say what a fleet run would do."""
    by_target: dict[str, list[CaseSpec]] = {}
    for case in cases:
        by_target.setdefault(case.target, []).append(case)
    found: dict[str, str | None] = {}
    for target, mine in by_target.items():
        if target == "gpu":
            found.update(_gpu_reasons(mine, local))
        elif target == "mpi":
            found.update({case.key: _mpi_reason(ranks) for case in mine})
        else:
            found.update(_host_reasons(mine))
    return {case.key: found[case.key] for case in cases}
