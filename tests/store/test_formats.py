"""Tests of bwprof.store.formats: the --format option of every command."""

from __future__ import annotations

import pytest

from bwprof.errors import BwprofError
from bwprof.store.formats import check_format


@pytest.mark.parametrize("name", ["", "CSV", "xlsx", "csv,parquet"])
def test_an_unknown_format_names_the_choices(name):
    with pytest.raises(BwprofError, match=r"^unknown --format .*; choose one of: csv, parquet$"):
        check_format(name)


def test_a_format_of_thousands_of_characters_is_a_short_line():
    """The refusal is one readable line, not the 5000 characters given."""
    with pytest.raises(BwprofError) as refused:
        check_format("9" * 5000)
    assert "(5000 characters)" in str(refused.value) and len(str(refused.value)) < 200
