import pytest

from bwprof.gpu.backend import Sample, Work
from bwprof.gpu.sampling import (
    HOLD_US,
    MAX_HOLD_US,
    MAX_OPS,
    TARGET_SAMPLE_S,
    ops_for,
    take_samples,
)


class ScriptedBackend:
    """time_sample answers from a script: seconds per op per stream, and whether covered."""

    sample_scale = 1.0

    def __init__(self, per_op_s, covered=()):
        self.per_op_s = per_op_s
        self.covered = list(covered)
        self.calls = []
        self.warmups = []

    def time_sample(self, works, gate, hold_us):
        self.calls.append((tuple(w.ops for w in works), gate, hold_us))
        self.warmups.append(tuple(w.warmup for w in works))
        for work in works:
            for _ in range(work.warmup + work.ops):  # the warm-up is issued, untimed
                work.enqueue()
        seconds = tuple(t * w.ops for t, w in zip(self.per_op_s, works, strict=True))
        covered = self.covered.pop(0) if self.covered else True
        return Sample(seconds, tuple(0.0 for _ in works), seconds, covered)


def test_ops_per_sample_reaches_the_target_within_bounds():
    assert ops_for(TARGET_SAMPLE_S / 10) == 10
    assert ops_for(1.0) == 1
    assert ops_for(1e-9) == MAX_OPS
    assert ops_for(0.0) == MAX_OPS


def test_samples_are_per_op_and_every_op_is_counted():
    issued = []
    backend = ScriptedBackend([TARGET_SAMPLE_S / 4, TARGET_SAMPLE_S / 2])
    sampled = take_samples(
        backend,
        lambda ops: [Work("s0", lambda: issued.append(0), ops),
                     Work("s1", lambda: issued.append(1), ops)],
        samples=3,
    )
    # Warm-up with one op per stream; K from the slower stream: 2 ms / 1 ms = 2. Every
    # sample is behind one untimed op per stream (1 ms of work is WARMUP_S), the warm-up's
    # own too; total_ops counts them.
    assert backend.calls[0] == ((1, 1), True, HOLD_US)
    assert backend.warmups == [(1, 1)] * 4
    assert sampled.ops_per_sample == 2
    assert sampled.total_ops == 2 + 3 * (1 + 2)
    assert issued.count(0) == issued.count(1) == sampled.total_ops
    assert sampled.per_stream_s[0] == pytest.approx([TARGET_SAMPLE_S / 4] * 3)
    assert sampled.per_stream_s[1] == pytest.approx([TARGET_SAMPLE_S / 2] * 3)
    assert sampled.span_s == pytest.approx([TARGET_SAMPLE_S / 2] * 3)
    assert sampled.note() == ""


def test_a_sample_the_gate_did_not_cover_is_taken_again_with_a_longer_hold():
    backend = ScriptedBackend([0.001], covered=[True, False, True, True])
    sampled = take_samples(backend, lambda ops: [Work("s", lambda: None, ops)], samples=2)
    holds = [hold for *_, hold in backend.calls]
    assert holds == [HOLD_US, HOLD_US, 2 * HOLD_US, 2 * HOLD_US]
    assert len(sampled.per_stream_s[0]) == 2
    assert sampled.uncovered == 0
    assert sampled.total_ops == 2 + 3 * (1 + sampled.ops_per_sample)  # warm-ups counted


def test_a_gate_that_never_covers_is_reported_not_hidden():
    backend = ScriptedBackend([0.001], covered=[True] + [False] * 100)
    sampled = take_samples(backend, lambda ops: [Work("s", lambda: None, ops)], samples=2)
    assert max(hold for *_, hold in backend.calls) == MAX_HOLD_US
    assert sampled.uncovered == 2
    assert "2 sample(s) started before all work was enqueued" in sampled.note()


def test_ungated_samples_pass_the_flag_through():
    backend = ScriptedBackend([0.001])
    take_samples(backend, lambda ops: [Work("s", lambda: None, ops)], samples=1, gate=False)
    assert all(gate is False for _, gate, _ in backend.calls)


def test_fixed_ops_skip_the_estimate():
    backend = ScriptedBackend([1e-6])
    sampled = take_samples(backend, lambda ops: [Work("s", lambda: None, ops)], samples=2, ops=3)
    assert sampled.ops_per_sample == 3
    assert [ops for ops, *_ in backend.calls] == [(1,), (3,), (3,)]


class SleepingBackend(ScriptedBackend):
    """A ScriptedBackend whose samples take their scripted time on the wall clock."""

    def time_sample(self, works, gate, hold_us):
        import time

        sample = super().time_sample(works, gate, hold_us)
        time.sleep(max(sample.seconds))
        return sample


def test_the_counter_window_repeats_the_work_untimed_and_is_what_counters_join_on():
    from bwprof.gpu.sampling import COUNTER_BATCH_S

    per_op = 0.001
    backend = SleepingBackend([per_op])
    issued = []
    sampled = take_samples(backend, lambda ops: [Work("s0", lambda: issued.append(0), ops)],
                           samples=3, counter_window_s=0.1)
    timed = 2 + 3 * (1 + sampled.ops_per_sample)  # each sample behind one warm-up op
    batch = round(COUNTER_BATCH_S / per_op)
    window_calls = backend.calls[4:]
    assert window_calls and all(call == ((batch,), False, 0) for call in window_calls)
    assert sampled.window_ops == batch * len(window_calls)
    assert sampled.total_ops == timed + sampled.window_ops == len(issued)  # validation sees all
    start, end = sampled.window_s
    assert end - start >= 0.1
    assert len(sampled.per_stream_s[0]) == 3  # the figure still comes from the timed samples
    plain = take_samples(ScriptedBackend([per_op]), lambda ops: [Work("s0", lambda: None, ops)],
                         samples=3)
    assert plain.window_ops == plain.total_ops == timed


# Catches: the counter window's batch sized from the fastest stream's fastest
# sample (min of mins) instead of the slowest stream's median
def test_the_counter_window_batch_is_sized_from_the_slowest_stream():
    from bwprof.gpu.sampling import COUNTER_BATCH_S, take_samples
    from tests.gpu.test_sampling import SleepingBackend

    backend = SleepingBackend([0.001, 0.004])  # stream 1 takes four times as long per op
    sampled = take_samples(backend, lambda ops: [Work("s0", lambda: None, ops),
                                                 Work("s1", lambda: None, ops)],
                           samples=3, counter_window_s=0.05)
    batch = round(COUNTER_BATCH_S / 0.004)  # a batch of the slowest stream lasts ~20 ms
    window_calls = backend.calls[4:]
    assert window_calls and all(ops == (batch, batch) for ops, _, _ in window_calls)
    assert sampled.window_ops == batch * len(window_calls)


def test_warm_up_is_four_ops_as_nvbandwidth_fewer_for_long_ones():
    from bwprof.gpu.sampling import WARMUP_OPS, WARMUP_S, warmup_ops

    assert WARMUP_OPS == 4
    assert warmup_ops(3.7e-6) == 4  # a 64 KiB copy
    assert warmup_ops(WARMUP_S / 2) == 2
    assert warmup_ops(4.8e-3) == 1  # a 256 MiB copy: one is warm-up enough
    assert warmup_ops(0.0) == 4


def test_fixed_ops_still_get_their_warm_up():
    backend = ScriptedBackend([1e-6])
    take_samples(backend, lambda ops: [Work("s", lambda: None, ops)], samples=2, ops=3)
    assert backend.warmups == [(1,), (4,), (4,)]


def test_a_backend_whose_timings_need_shorter_samples_gets_fewer_ops():
    """The simulator's sample_scale (a tenth): its samples aim at a tenth of a GPU's."""
    from bwprof.gpu.sim import SimBackend

    per_op = TARGET_SAMPLE_S / 100
    full = take_samples(ScriptedBackend([per_op]), lambda ops: [Work("s", lambda: None, ops)],
                        samples=1)
    tenth = ScriptedBackend([per_op])
    tenth.sample_scale = SimBackend.sample_scale
    short = take_samples(tenth, lambda ops: [Work("s", lambda: None, ops)], samples=1)
    assert (full.ops_per_sample, short.ops_per_sample) == (100, 10)
