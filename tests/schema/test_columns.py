"""The column dictionary (`bwprof/schema/columns.py`) covers every column of results.csv, and
the table of columns in docs/columns.md is generated from it, so the two never drift."""

from __future__ import annotations

import re
from pathlib import Path

from bwprof.schema.columns import RESULT_COLUMNS, markdown_table
from bwprof.schema.flags import FLAGS
from bwprof.schema.rows import CSV_COLUMNS

COLUMNS_DOC = (Path(__file__).parents[2] / "docs" / "columns.md").read_text(encoding="utf-8")


def test_every_column_of_results_csv_has_a_meaning_in_file_order():
    assert tuple(RESULT_COLUMNS) == CSV_COLUMNS
    assert all(meaning.strip() for meaning in RESULT_COLUMNS.values())


# Catches: a column added to the schema (or a meaning changed) in one place but not the other
def test_the_documented_table_of_columns_is_the_generated_one():
    assert markdown_table() in COLUMNS_DOC, (
        "docs/columns.md's table of results.csv columns differs from bwprof/schema/columns.py: "
        "paste the output of `python -c 'from bwprof.schema.columns import markdown_table; "
        "print(markdown_table())'` over it")


def test_the_documented_table_of_flags_names_every_flag():
    table = COLUMNS_DOC.split("The flags (`bwprof/schema/flags.py`):", 1)[1].split("\n\n", 2)[1]
    named = re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.MULTILINE)
    assert named == list(FLAGS)


STATISTIC = re.compile(r"_(?:median|best|mean|max|min)(?=_s$|$)")
"""The statistic in a column's name: `gbps_median` and `gbps_best` are one quantity."""


# Catches: columns.csv giving `device_name` the text of `device` (a group's one text, read
# one column at a time): columns share a meaning only where they are statistics of one
# quantity (median and best, mean and highest), which their text says.
def test_no_two_columns_share_a_meaning_unless_statistics_of_one_quantity():
    by_meaning: dict[str, set[str]] = {}
    for column, meaning in RESULT_COLUMNS.items():
        by_meaning.setdefault(meaning, set()).add(column)
    shared = {frozenset(columns) for columns in by_meaning.values() if len(columns) > 1}
    assert all(len({STATISTIC.sub("", c) for c in columns}) == 1 for columns in shared), [
        sorted(columns) for columns in shared if len({STATISTIC.sub("", c) for c in columns}) > 1]
    assert frozenset({"gbps_median", "gbps_best"}) in shared  # the intended sharing still holds
    assert RESULT_COLUMNS["device"] != RESULT_COLUMNS["device_name"]
