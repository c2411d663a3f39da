"""A row's note from its parts: the one joiner, `measurement.join_notes`."""

from __future__ import annotations

from bwprof.gpu.executor import _with_note
from bwprof.measurement import Measurement, join_notes


def _row(note: str) -> Measurement:
    return Measurement((1e-3,), 1 << 20, 1 << 20, "gpu0", "test GPU", "h2d", "host", True,
                       note=note)


def test_join_notes_leaves_out_the_empty_parts_in_order():
    assert join_notes("a", "", "b") == "a; b"
    assert join_notes("", "") == join_notes() == ""


def test_a_gpu_rows_added_note_goes_first_through_the_one_joiner():
    assert _with_note(_row("sampled"), "validation failed").note == "validation failed; sampled"
    assert _with_note(_row(""), "x").note == "x"
    assert _with_note(_row("sampled"), "").note == "sampled"
