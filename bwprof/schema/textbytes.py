"""Arrow text columns read at their bytes: whether any cell holds one of a few characters, and
each cell's first byte, from one pass over the column's data and no Python per cell.

Writing a fleet's table asks both of every text column (does a cell need quotes, a carriage
return, an apostrophe for a spreadsheet?); a regular expression over two million cells costs
a tenth of a second a column, a scan of its bytes a few milliseconds. Both answers are
allowed to say more than the cells do (a null cell's stray bytes), never less: callers use
them to skip work, and check what they mark cell by cell.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def arrow_stored(dtype: Any) -> bool:
    """Whether a pandas column of `dtype` holds its text in Arrow (`str`, `string[pyarrow]`):
    its bytes can be read here, and every cell is UTF-8 (Arrow refuses a lone surrogate on
    the way in, so `printable` would leave each cell as it is)."""
    return isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow"


def _chunks(column: Any) -> list[Any]:
    return list(column.chunks) if hasattr(column, "chunks") else [column]


def _offsets(chunk: Any) -> np.ndarray | None:
    """The chunk's offsets into its data (one more than its cells), or None for an array
    whose bytes are not laid out as `string` or `large_string` are."""
    import pyarrow as pa

    if pa.types.is_large_string(chunk.type):
        width = np.int64
    elif pa.types.is_string(chunk.type):
        width = np.int32
    else:
        return None
    if len(chunk) == 0:  # Arrow lets an empty array hold no offsets at all
        return np.zeros(1, dtype=width)
    buffer = chunk.buffers()[1]
    count = chunk.offset + len(chunk) + 1
    if buffer is None or buffer.size < count * np.dtype(width).itemsize:
        return None  # not laid out as Arrow says: the caller asks the cells themselves
    return np.frombuffer(buffer, dtype=width, count=count)[chunk.offset:]


def joined_bytes(chunk: Any) -> bytes | None:
    """Every cell's bytes of an Arrow text array, end to end (its data between its first and
    last offset: a null cell's stray bytes too), or None for an array of another layout."""
    if len(chunk) == 0:
        return b""
    offsets = _offsets(chunk)
    if offsets is None:
        return None
    data = chunk.buffers()[2]
    begin, end = int(offsets[0]), int(offsets[-1])
    if data is None or end <= begin:
        return b""
    return data.slice(begin, end - begin).to_pybytes()


def holds_any(column: Any, characters: bytes) -> bool:
    """Whether a cell of the Arrow text `column` (an Array or a ChunkedArray) may hold one of
    `characters` (ASCII): False only where none does; True too for an array of another
    layout."""
    for chunk in _chunks(column):
        text = joined_bytes(chunk)
        if text is None:
            return True
        if any(bytes((character,)) in text for character in characters):
            return True
    return False


def first_bytes(column: Any) -> np.ndarray | None:
    """Each cell's first byte (0 for an empty or missing cell), or None for an array of
    another layout."""
    parts = []
    for chunk in _chunks(column):
        offsets = _offsets(chunk)
        if offsets is None:
            return None
        starts, lengths = offsets[:-1], np.diff(offsets)
        present = lengths > 0
        if chunk.null_count:
            present &= chunk.is_valid().to_numpy(zero_copy_only=False)
        first = np.zeros(len(chunk), dtype=np.uint8)
        data = chunk.buffers()[2]
        if data is not None and present.any():
            first[present] = np.frombuffer(data, dtype=np.uint8)[starts[present]]
        parts.append(first)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
