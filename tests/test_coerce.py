"""bwprof.coerce: numbers out of untyped values, exact where they are whole."""

import math

import numpy as np
import pytest

from bwprof.coerce import comma_list, integer, optional_integer
from bwprof.errors import BwprofError

LARGE = [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 8, 2**53 + 1, 2**62 + 8, 2**63 - 1]
"""Across int32's and uint32's ends, past float64's exact integers, up to int64's end."""


@pytest.mark.parametrize("value", LARGE)
def test_integers_stay_exact_at_any_size(value):
    """A pandas Int64 cell is a NumPy int64 and a CSV cell text: through a float either would
    come back rounded past 2^53 (2^62 + 8 bytes read as 2^62)."""
    assert integer(value) == value
    assert integer(np.int64(value)) == value and type(integer(np.int64(value))) is int
    assert integer(np.uint64(value)) == value
    assert integer(str(value)) == value and integer(f" {value} ") == value
    assert optional_integer(np.int64(value)) == value


def test_uint64_beyond_int64_and_negative_integers_are_exact():
    assert integer(np.uint64(2**64 - 1)) == 2**64 - 1
    assert integer(np.int32(-5)) == -5 and integer("-5") == -5 and integer("+5") == 5


def test_other_numbers_still_go_through_their_float():
    assert integer(12.0) == 12 and integer("1e3") == 1000 and integer(np.float64(2.0**40)) == 2**40
    assert optional_integer(None) is None and optional_integer(math.nan) is None
    for bad in ("1.5", 1.5, "nine", ""):
        with pytest.raises((TypeError, ValueError)):
            integer(bad)
    with pytest.raises(TypeError):
        integer(True)


# Catches (issue 37): bwprof.run(cases=123) raised TypeError from a join
@pytest.mark.parametrize("value", [123, [1], b"ddr", {"ddr_copy": 1}, 1.5])
def test_a_comma_list_of_the_wrong_kind_is_one_line(value):
    with pytest.raises(BwprofError, match=r"^--cases expects a string such as 'a,b' or a list "
                                          r"of strings, got "):
        comma_list(value, "--cases", "a,b")


def test_a_comma_list_takes_text_and_strings():
    assert comma_list(None, "--cases", "a") is None
    assert comma_list("a,b", "--cases", "a") == "a,b"
    assert comma_list(("a", "b"), "--cases", "a") == "a,b"
    assert comma_list(iter(["a"]), "--cases", "a") == "a"
