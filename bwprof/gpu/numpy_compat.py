"""Keep numba-cuda's kernel compiler working on a NumPy newer than it knows.

numba-cuda 0.30 registers a device overload for `np.row_stack` when it first compiles a
kernel, and NumPy 2.5 removed that old alias of `np.vstack` (deprecated since 2.0): every
compile then fails with "module 'numpy' has no attribute 'row_stack'". The image on our H200
machine ships exactly that pair. Restoring the alias, only where it is missing, is the
smallest change that lets the compiler load; nothing in bwprof calls it.
"""

from __future__ import annotations

import logging
from types import ModuleType

import numpy

log = logging.getLogger("bwprof.cuda")

REMOVED_ALIASES = {"row_stack": "vstack"}
"""Aliases newer NumPy dropped that numba-cuda still names, and what each stood for."""


def restore_removed_aliases(module: ModuleType = numpy) -> list[str]:
    """Put back each alias `module` lacks, as the function it named; return those restored."""
    restored = []
    for alias, target in REMOVED_ALIASES.items():
        if not hasattr(module, alias) and hasattr(module, target):
            setattr(module, alias, getattr(module, target))
            restored.append(alias)
    if restored:
        log.info("NumPy %s lacks %s, which numba-cuda still names: restored as aliases",
                 getattr(module, "__version__", "?"), ", ".join(restored))
    return restored
