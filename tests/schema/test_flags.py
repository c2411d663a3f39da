import pytest

from bwprof.schema.flags import FLAGS, has_flag, join_flags, split_flags, unknown_flags


def test_flags_are_written_once_each_in_vocabulary_order():
    assert join_flags(["noisy", "in_cache", "noisy"]) == "in_cache|noisy"
    assert join_flags([]) == ""


def test_a_flag_outside_the_vocabulary_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown flag.*fast"):
        join_flags(["fast"])
    assert unknown_flags("in_cache|fast") == ["fast"]


@pytest.mark.parametrize(("cell", "flags"), [
    ("", frozenset()), (None, frozenset()), (float("nan"), frozenset()),
    ("l2_resident", {"l2_resident"}), (" c2c_link | noisy ", {"c2c_link", "noisy"}),
])
def test_a_cell_reads_back_as_its_flags(cell, flags):
    assert split_flags(cell) == flags


def test_every_flag_is_documented():
    assert all(FLAGS.values())
    assert has_flag("in_cache|noisy", "noisy") and not has_flag("in_cache", "noisy")
