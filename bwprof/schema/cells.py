"""Text cells that a spreadsheet would run as formulas, written so it does not.

A CSV cell whose text starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a
formula to Excel, LibreOffice and Google Sheets (a host name or a note taken from the
machine could be one). bwprof writes such text with a leading apostrophe, which spreadsheets
show as text; numbers (`-1.5`, `+3e9`) are left alone. Text that already starts with
apostrophes before such a character gets one more, so `from_spreadsheet` gives back exactly
what was written: every CSV reader of bwprof's own files undoes it.
"""

from __future__ import annotations

import re

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
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
    return [str(c) for c in frame.columns
            if frame[c].dtype == object or isinstance(frame[c].dtype, pd.StringDtype)]


def spreadsheet_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` whose text cells are safe to open in a spreadsheet."""
    columns = _text_columns(frame)
    if not columns:
        return frame
    safe = frame.copy()
    for column in columns:
        safe[column] = safe[column].map(spreadsheet_text)
    return safe


def frame_from_spreadsheet(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (read from a bwprof CSV) with the apostrophes of `spreadsheet_frame` undone,
    in place; returned for chaining."""
    for column in _text_columns(frame):
        if frame[column].map(lambda v: isinstance(v, str) and v.startswith("'")).any():
            frame[column] = frame[column].map(from_spreadsheet)
    return frame
