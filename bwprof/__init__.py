"""bwprof: memory-bandwidth and compute/transfer-overlap profiler for GPU servers.

`bwprof.run(...)` measures this machine and returns a RunResult whose `.results` is a pandas
DataFrame and `.system` the machine metadata — the same data `bwprof run` writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bwprof._version import __version__

if TYPE_CHECKING:
    from bwprof.api import RunResult, run

__all__ = ["RunResult", "__version__", "run"]


def __getattr__(name: str) -> Any:
    # Lazy: `import bwprof` stays cheap; numba, pandas and CuPy load only when measuring.
    if name in ("run", "RunResult"):
        from bwprof import api

        return getattr(api, name)
    raise AttributeError(f"module 'bwprof' has no attribute {name!r}")
