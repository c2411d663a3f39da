import threading

import pytest

from bwprof.deadline import call_within


def test_a_call_that_ends_in_time_gives_its_value_or_raises_its_error_here():
    assert call_within(lambda: 42, 5.0, "t") == (None, 42)
    assert call_within(lambda: None, 5.0, "t") == (None, None)

    def fails():
        raise ValueError("from the call")

    with pytest.raises(ValueError, match="from the call"):
        call_within(fails, 5.0, "t")


def test_a_call_past_its_deadline_is_left_running_on_a_daemon_thread():
    release = threading.Event()
    stuck, value = call_within(release.wait, 0.05, "bwprof-test-stuck")
    assert value is None and stuck is not None
    assert stuck.is_alive() and stuck.daemon and stuck.name == "bwprof-test-stuck"
    release.set()
    stuck.join(5)
    assert not stuck.is_alive()
