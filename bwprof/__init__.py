"""bwprof: memory-bandwidth and compute/transfer-overlap profiler for GPU servers.

`bwprof.run(...)` measures this machine and returns a RunResult, a `Run` whose `.results` is a
pandas DataFrame and `.meta` the machine metadata (`bwprof.schema.meta.RunMeta`) — the same
data `bwprof run` writes. `bwprof.load(RUN_DIR)` reads a saved run folder back as the same
`Run`; `.summary`, `.checks` and `.ceilings` are derived from it once, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bwprof._version import __version__

if TYPE_CHECKING:
    from bwprof.api import RunResult, load, run
    from bwprof.schema.meta import RunMeta
    from bwprof.store.runfolder import RunFolder

__all__ = ["Run", "RunFolder", "RunMeta", "RunResult", "__version__", "load", "run"]

_LAZY = {"run": "bwprof.api", "RunResult": "bwprof.api", "load": "bwprof.saved",
         "Run": "bwprof.analysis.run",
         "RunFolder": "bwprof.store.runfolder", "RunMeta": "bwprof.schema.meta"}


def __getattr__(name: str) -> Any:
    # Lazy: `import bwprof` stays cheap; numba, pandas and CuPy load only when measuring.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bwprof' has no attribute {name!r}")
