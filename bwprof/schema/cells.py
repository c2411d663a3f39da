"""Text cells that a spreadsheet would run as formulas, written so it does not.

A CSV cell whose text starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a
formula to Excel, LibreOffice and Google Sheets (a host name or a note taken from the
machine could be one); a line feed, which some readers skip, is taken as one too. bwprof
writes such text with a leading apostrophe, which spreadsheets show as text; numbers
(`-1.5`, `+3e9`) are left alone. Text that already starts with apostrophes before such a
character gets one more, so `from_spreadsheet` gives back exactly what was written: every
CSV reader of bwprof's own files undoes it.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bwprof.schema import textbytes

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _escaped(text: str) -> bool:
    """Whether `text` needs the apostrophe (it would start a formula once quotes go)."""
    bare = text.lstrip("'")
    return bool(bare) and bare.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(bare)


def spreadsheet_text(value: object) -> object:
    """`value` as it goes into a CSV cell: text that would be a formula gets an apostrophe."""
    if isinstance(value, str) and _escaped(value):
        return "'" + value
    return value


def from_spreadsheet(value: object) -> object:
    """The text `spreadsheet_text` was given, from the cell it wrote."""
    if isinstance(value, str) and value.startswith("'") and _escaped(value[1:]):
        return value[1:]
    return value


def _text_columns(frame: pd.DataFrame) -> list[str]:
    return [str(c) for c, dtype in frame.dtypes.items()
            if pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype)]


_CARRIAGE_RETURN = re.compile(r"\r\n?")


def _frame_cell(value: object) -> object:
    """A whole-file table's text cell: its carriage returns as line feeds, then the
    apostrophe rule. pandas quotes a cell holding a line feed but not one holding a bare
    carriage return, which Excel and csv readers take as the end of the row: the rest of the
    cell (`=cmd...` after a host name's CR) would start a row of its own, unescaped."""
    if isinstance(value, str) and "\r" in value:
        value = _CARRIAGE_RETURN.sub("\n", value)
    return spreadsheet_text(value)


def spreadsheet_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame`, or a copy of it where a text cell changes, whose text cells are safe to open
    in a spreadsheet (as a CSV written with pandas' default line feed: carriage returns
    become line feeds). Each text column is searched at once (`_changing`) and only the
    cells that may change go through `_frame_cell`: a Python call per cell cost seconds
    for a fleet's summary."""
    changed: dict[int, pd.Series] = {}
    for position, dtype in enumerate(frame.dtypes):  # by position: names may repeat
        if not (pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype)):
            continue
        values = frame.iloc[:, position]
        marked = _changing(values)
        if marked.any():
            safe = values.copy()
            safe[marked] = [_frame_cell(value) for value in values[marked]]
            changed[position] = safe
    if not changed:
        return frame
    copy = frame.copy()
    for position, safe in changed.items():
        copy.isetitem(position, safe)
    return copy


_MAY_CHANGE = r"^'*[=+\-@\t\n]|\r"
"""Text `_frame_cell` may change: a formula start after any apostrophes (a number such as
`-1.5` too, which it then leaves alone), or a carriage return anywhere."""


def _changing(values: pd.Series) -> np.ndarray:
    """Which cells of a text column `_frame_cell` may change, as one boolean array: a
    superset (the marked cells are checked one by one), never missing one that changes.
    Cells that are not text are never marked (`_frame_cell` leaves them as they are)."""
    if textbytes.arrow_stored(values.dtype):
        at_bytes = _changing_arrow(values)
        if at_bytes is not None:
            return at_bytes
    try:
        found = values.str.contains(_MAY_CHANGE, regex=True)
    except AttributeError:  # no text in the column at all: .str refuses it
        return np.zeros(len(values), dtype=bool)
    except TypeError:  # text beside bytes: each text cell is looked at
        return np.array([isinstance(value, str) for value in values], dtype=bool)
    return found.to_numpy(dtype=bool, na_value=False)


_MAY_START = np.zeros(256, dtype=bool)
_MAY_START[list(b"'=+-@\t\n")] = True
"""The first bytes of the cells `_MAY_CHANGE` marks without a carriage return (a superset:
every cell that starts with an apostrophe)."""


def _changing_arrow(values: pd.Series) -> np.ndarray | None:
    """`_changing` of an Arrow-backed text column from its bytes (`textbytes`): each cell's
    first byte, where no cell holds a carriage return; None where that cannot say."""
    try:
        import pyarrow as pa
    except ImportError:
        return None
    column = pa.array(values.array)  # the column's own Arrow data, not a copy
    if textbytes.holds_any(column, b"\r"):
        return None
    first = textbytes.first_bytes(column)
    return None if first is None else _MAY_START[first]


def _quoted(values: pd.Series) -> pd.Series:
    """Which cells are text that starts with an apostrophe: one vectorised test of the
    column (a Python call per cell cost seconds a million rows); cells that are not text
    are not."""
    try:
        return values.str.startswith("'").fillna(False).astype(bool)
    except AttributeError:  # no text in the column at all: .str refuses it
        return values.map(lambda v: isinstance(v, str) and v.startswith("'"))


def frame_from_spreadsheet(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (read from a bwprof CSV) with the apostrophes of `spreadsheet_frame` undone,
    in place; returned for chaining."""
    for column in _text_columns(frame):
        if _quoted(frame[column]).any():
            frame[column] = frame[column].map(from_spreadsheet)
    return frame
