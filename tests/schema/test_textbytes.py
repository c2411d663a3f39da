"""Arrow text read at its bytes: the answers match the cells' own, for every layout of array
a column arrives in (sliced, chunked, with nulls, `string` or `large_string`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bwprof.schema.textbytes import first_bytes, holds_any

CELLS = ["host-1", "", None, "a,b", '="x"', "\tx", "ünï", "line\nend", None, "'=1", "z"]


def _layouts(cells: list[str | None]) -> list[object]:
    """The same cells as every kind of array the writers meet."""
    layouts: list[object] = []
    for kind in (pa.string(), pa.large_string()):
        whole = pa.array(["pad,\r\n", *cells, 'tail"\r'], type=kind)
        layouts.append(pa.array(cells, type=kind))
        layouts.append(whole.slice(1, len(cells)))  # the pad's bytes lie outside the slice
        half = len(cells) // 2
        layouts.append(pa.chunked_array([whole.slice(1, half),
                                         whole.slice(1 + half, len(cells) - half)]))
    return layouts


@pytest.mark.parametrize("layout", range(6))
@pytest.mark.parametrize("characters", [b",", b'"', b"\n", b"\r", b"\t", b",\r", b"#"])
def test_holds_any_says_whether_a_cell_holds_a_character(layout, characters):
    column = _layouts(CELLS)[layout]
    expected = any(chr(c) in cell for cell in CELLS if cell for c in characters)
    assert holds_any(column, characters) == expected


@pytest.mark.parametrize("layout", range(6))
def test_first_bytes_are_each_cells_first_byte_and_0_where_none(layout):
    column = _layouts(CELLS)[layout]
    expected = [cell.encode()[0] if cell else 0 for cell in CELLS]
    assert list(first_bytes(column)) == expected


def test_an_empty_column_and_another_layout():
    assert not holds_any(pa.array([], type=pa.large_string()), b",")
    assert list(first_bytes(pa.chunked_array([], type=pa.string()))) == []
    assert holds_any(pa.array([1, 2]), b",")  # not text bytes: it cannot say no
    assert first_bytes(pa.array([1, 2])) is None


def test_an_empty_chunk_without_offsets_is_read_as_empty():
    """Arrow allows an empty array no offsets buffer at all (another producer's data)."""
    bare = pa.Array.from_buffers(pa.large_string(), 0, [None, pa.py_buffer(b""),
                                                        pa.py_buffer(b"")])
    column = pa.chunked_array([bare, pa.array(["=x", "a,b"], pa.large_string())])
    assert list(first_bytes(column)) == [ord("="), ord("a")]
    assert holds_any(column, b",") and not holds_any(column, b"\r")
