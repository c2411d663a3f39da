"""Host DDR bandwidth cases (`ddr_*`): STREAM over float64 arrays with all selected threads.

Owns the loop for one figure: fill the arrays in parallel, launch the kernel `repeats` times
with a monotonic clock around each launch, drop the first, then validate every element
against gold values. Statistics and bandwidth are the runner's job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import numba
import numpy as np

from bwprof.cases import CaseSpec
from bwprof.host import stream
from bwprof.measurement import Job, Measurement
from bwprof.plan import HOST_ELEMENT_BYTES, Plan


class HostStream:
    """Three float64 arrays and the STREAM kernels that run over them."""

    def __init__(
        self,
        elements: int,
        kernels: Mapping[str, stream.StreamKernel] = stream.KERNELS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.elements = elements
        self.kernels = kernels
        self.clock = clock
        self.a = np.empty(elements)
        self.b = np.empty(elements)
        self.c = np.empty(elements)

    def reset(self) -> None:
        stream.fill(self.a, self.b, self.c, stream.INIT_A, stream.INIT_B, stream.INIT_C)

    def time_kernel(self, name: str, repeats: int) -> tuple[list[float], object]:
        """Seconds of each launch after the first (dropped), and the last launch's return value."""
        kernel = self.kernels[name]
        self.reset()
        seconds, value = [], None
        for _ in range(repeats):
            start = self.clock()
            value = kernel.run(self.a, self.b, self.c, stream.SCALAR)
            seconds.append(self.clock() - start)
        return seconds[1:], value

    def validate(self, name: str, repeats: int, value: object) -> str:
        """Empty when every element matches the gold values, else what went wrong."""
        return stream.check(self.kernels[name], repeats, self.a, self.b, self.c, value)


@contextmanager
def numba_threads(count: int) -> Iterator[None]:
    previous = numba.get_num_threads()
    numba.set_num_threads(count)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


class HostExecutor:
    """Runs `ddr_*` jobs; keeps the arrays of the current size between cases."""

    backend = "host"

    def __init__(
        self,
        cpu_model: str,
        kernels: Mapping[str, stream.StreamKernel] = stream.KERNELS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cpu_model = cpu_model
        self.kernels = kernels
        self.clock = clock
        self._bench: HostStream | None = None
        self._threads: int | None = None
        self._warm = False

    def unavailable_reason(self, case: CaseSpec) -> str | None:
        return None

    def jobs(self, case: CaseSpec, plan: Plan) -> list[Job]:
        return [
            Job(case.key, size_bytes=size, threads=threads)
            for size in plan.host_array_bytes
            for threads in plan.threads
        ]

    def measure(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        assert job.size_bytes is not None and job.threads is not None
        if not self._warm:
            stream.warm_up()
            self._warm = True
        elements = job.size_bytes // HOST_ELEMENT_BYTES
        name = case.key.removeprefix("ddr_")
        with numba_threads(job.threads):
            # New arrays for a new size or thread count: pages are placed by their first
            # touch, and N threads must not work on pages one thread placed on one node.
            if self._bench is None or (self._bench.elements, self._threads) != (elements,
                                                                                job.threads):
                self._bench = None  # free the old arrays before taking new ones
                self._bench = HostStream(elements, self.kernels, self.clock)
                self._threads = job.threads
            seconds, value = self._bench.time_kernel(name, plan.repeats)
        problem = self._bench.validate(name, plan.repeats, value)
        array_bytes = elements * HOST_ELEMENT_BYTES
        return [
            Measurement(
                seconds_per_op=tuple(seconds),
                bytes_per_op=case.bytes_per_op(array_bytes),
                size_bytes=array_bytes,
                device="cpu",
                device_name=self.cpu_model,
                direction=case.direction,
                memory=case.memory,
                valid=not problem,
                note=f"validation failed: {problem}" if problem else "",
                threads=job.threads,
            )
        ]

    def close(self) -> None:
        self._bench = None
