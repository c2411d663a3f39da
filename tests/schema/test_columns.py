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
