"""Measurement rules that planning and the cases share (a neutral module: the case catalogue
imports the cases, and planning imports the catalogue)."""

from __future__ import annotations

CACHE_MULTIPLE = 4
"""STREAM's rule: each array (or a chase's working set) at least 4x the last-level cache for
a memory figure."""
HOST_MEMORY_SHARE = 0.6
"""Never take more than this share of available memory for host buffers."""
