import pytest

from bwprof.cases import CaseSpec, get_case
from bwprof.executor import Executor, UnavailableExecutor
from bwprof.measurement import Job, Measurement, NotRun
from bwprof.plan import make_plan
from bwprof.runner import RunContext, Runner
from bwprof.units import MiB

CONTEXT = RunContext("run-1", "box")


class ScriptedExecutor(Executor):
    """Returns hand-made measurements; jobs named in `fail`/`not_run` misbehave on purpose."""

    backend = "host"

    def __init__(self, fail=(), not_run=(), interrupt_on=None, valid=True):
        self.fail, self.not_run, self.interrupt_on, self.valid = fail, not_run, interrupt_on, valid
        self.closed = False

    def unavailable_reason(self, case: CaseSpec):
        return None

    def jobs(self, case, plan):
        return [Job(case.key, size_bytes=s, threads=1) for s in plan.host_array_bytes]

    def measure(self, case, job, plan):
        if job.case == self.interrupt_on:
            raise KeyboardInterrupt
        if job.case in self.fail:
            raise RuntimeError("boom\nsecond line")
        if job.case in self.not_run:
            raise NotRun("waived", "does not apply here")
        return [Measurement(
            seconds_per_op=(2.0, 1.0, 4.0), bytes_per_op=case.bytes_per_op(job.size_bytes),
            size_bytes=job.size_bytes, device="cpu", device_name="cpu", direction="within",
            memory="ddr", valid=self.valid, note="" if self.valid else "validation failed: x",
            threads=1, peak=None if self.valid else 1.0,
        )]

    def close(self):
        self.closed = True


class ListSink:
    def __init__(self):
        self.rows, self.timings = [], []

    def add(self, row, seconds):
        self.rows.append(row)
        self.timings.append(list(seconds))


def _plan(cases="ddr_"):
    return make_plan(cases=cases, repeats=4, size="1MiB,2MiB", usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=None)


def test_rows_carry_statistics_derived_from_raw_times():
    sink = ListSink()
    rows = Runner(_plan("ddr_triad"), {"host": ScriptedExecutor()}, CONTEXT, sink).run()
    assert [r.size_bytes for r in rows] == [1 << 20, 2 << 20]
    row = rows[0]
    assert (row.time_median_s, row.time_min_s, row.repeats) == (2.0, 1.0, 3)
    assert row.bytes_per_op == row.work_per_op == 3 << 20
    assert (row.metric, row.unit, row.higher_is_better) == ("bandwidth", "GB/s", True)
    assert row.value_best == row.gbps_best == pytest.approx(3 * (1 << 20) / 1.0 / 1e9)
    assert row.value_median == row.gbps_median == pytest.approx(3 * (1 << 20) / 2.0 / 1e9)
    assert row.flags == {"noisy"}  # 2, 1 and 4 s: a CV of 0.65
    assert row.status == "ok" and row.backend == "host" and row.run_id == "run-1"
    assert sink.rows == rows
    assert sink.timings[0] == [2.0, 1.0, 4.0]


def test_invalid_measurement_becomes_an_invalid_row_with_pct_of_peak():
    (row, _) = Runner(_plan("ddr_copy"), {"host": ScriptedExecutor(valid=False)}, CONTEXT).run()
    assert row.status == "invalid"
    assert row.note.startswith("validation failed")
    assert row.pct_of_peak == pytest.approx(100 * row.gbps_best / 1.0)


def test_an_exception_becomes_an_error_row_and_the_run_goes_on():
    executor = ScriptedExecutor(fail={"ddr_copy"}, not_run={"ddr_add"})
    rows = Runner(_plan(), {"host": executor}, CONTEXT).run()
    by_case = {}
    for row in rows:
        by_case.setdefault(row.case, []).append(row.status)
    assert by_case["ddr_copy"] == ["error", "error"]
    assert by_case["ddr_add"] == ["waived", "waived"]
    assert by_case["ddr_triad"] == ["ok", "ok"]
    error = next(r for r in rows if r.status == "error")
    assert error.note == "RuntimeError: boom second line"
    assert error.gbps_best is None


def test_bwprof_debug_prints_the_traceback_of_an_error_row(monkeypatch, capsys):
    executor = ScriptedExecutor(fail={"ddr_copy"})
    Runner(_plan("ddr_copy"), {"host": executor}, CONTEXT).run()
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setenv("BWPROF_DEBUG", "1")
    Runner(_plan("ddr_copy"), {"host": executor}, CONTEXT).run()
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err and "test_runner.py" in err


def test_unavailable_backend_gives_one_skipped_row_per_case():
    plan = make_plan(cases="ddr_copy,h2d_pinned,hbm_triad", repeats=2, usable_cpus=1,
                     llc_bytes=None, memory_available_bytes=None, size="1MiB")
    executors = {"host": ScriptedExecutor(), "gpu": UnavailableExecutor("cuda", "no GPU here")}
    rows = Runner(plan, executors, CONTEXT).run()
    gpu_rows = [r for r in rows if r.case != "ddr_copy"]
    assert [(r.case, r.status, r.note, r.backend) for r in gpu_rows] == [
        ("h2d_pinned", "skipped", "no GPU here", "cuda"),
        ("hbm_triad", "skipped", "no GPU here", "cuda"),
    ]


def test_waived_reason_from_the_executor():
    class Waiving(ScriptedExecutor):
        def unavailable_reason(self, case):
            return NotRun("waived", "needs two GPUs")

    (row,) = Runner(_plan("ddr_copy"), {"host": Waiving()}, CONTEXT).run()
    assert (row.status, row.note, row.size_bytes) == ("waived", "needs two GPUs", None)


def test_interrupt_keeps_finished_rows_in_the_sink():
    sink = ListSink()
    runner = Runner(_plan(), {"host": ScriptedExecutor(interrupt_on="ddr_add")}, CONTEXT, sink)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert [r.case for r in sink.rows] == ["ddr_copy", "ddr_copy", "ddr_scale", "ddr_scale"]
    assert runner.rows == sink.rows


def test_progress_sees_every_job():
    events, lefts = [], []

    class Recorder:
        def start(self, total, estimate_s=None):
            events.append(("start", total))
            assert estimate_s is not None and estimate_s > 0

        def job_started(self, job, left_s=None):
            events.append(("job", job.case))
            lefts.append(left_s)

        def job_finished(self, job, rows):
            events.append(("done", len(rows)))

    Runner(_plan("ddr_copy"), {"host": ScriptedExecutor()}, CONTEXT, progress=Recorder()).run()
    assert events == [("start", 2), ("job", "ddr_copy"), ("done", 1), ("job", "ddr_copy"),
                      ("done", 1)]
    assert lefts[0] > lefts[1] > 0  # what is left of the estimate shrinks job by job


def test_close_closes_every_executor():
    executor = ScriptedExecutor()
    runner = Runner(_plan("ddr_copy"), {"host": executor}, CONTEXT)
    runner.close()
    assert executor.closed
    assert get_case("ddr_copy").target == "host"


def test_an_executor_that_cannot_list_its_jobs_gives_an_error_row_and_the_run_goes_on():
    class Broken(ScriptedExecutor):
        def jobs(self, case, plan):
            if case.key == "ddr_copy":
                raise RuntimeError("cudaErrorDevicesUnavailable:\nbusy")
            return super().jobs(case, plan)

    rows = Runner(_plan("ddr_copy,ddr_triad"), {"host": Broken()}, CONTEXT).run()
    assert [(r.case, r.status) for r in rows] == [("ddr_copy", "error"), ("ddr_triad", "ok"),
                                                  ("ddr_triad", "ok")]
    assert rows[0].note == "RuntimeError: cudaErrorDevicesUnavailable: busy"


def test_a_failing_close_is_reported_not_raised():
    class StuckGpu(ScriptedExecutor):
        def close(self):
            raise RuntimeError("cudaErrorIllegalAddress")

    runner = Runner(_plan("ddr_copy"), {"host": StuckGpu()}, CONTEXT)
    assert runner.close() == ["host: RuntimeError: cudaErrorIllegalAddress"]


def test_an_impossible_time_becomes_an_error_row():
    class ZeroTime(ScriptedExecutor):
        def measure(self, case, job, plan):
            (m,) = super().measure(case, job, plan)
            return [Measurement(**{**m.__dict__, "seconds_per_op": (0.0,)})]

    (row, _) = Runner(_plan("ddr_copy"), {"host": ZeroTime()}, CONTEXT).run()
    assert row.status == "error" and "positive" in row.note


def test_not_run_rows_name_both_gpus_of_a_pair():
    class PairExecutor(ScriptedExecutor):
        backend = "cuda"

        def jobs(self, case, plan):
            return [Job(case.key, size_bytes=1 << 20, device=0, peer=3)]

    plan = make_plan(cases="p2p_copy", repeats=2, usable_cpus=1, llc_bytes=None,
                     memory_available_bytes=None)
    (row,) = Runner(plan, {"gpu": PairExecutor(not_run=("p2p_copy",))}, CONTEXT).run()
    assert (row.device, row.status, row.note) == ("gpu0->gpu3", "waived", "does not apply here")
    assert Job("h2d_pinned", device=2).device_label == "gpu2"
    assert Job("h2d_all").device_label == ""


def test_a_not_run_row_keeps_the_memory_its_job_names():
    """net_p2p measures host and GPU buffers: a waived GPU-buffer job says hbm, not host."""
    class BufferKinds(ScriptedExecutor):
        backend = "mpi"

        def jobs(self, case, plan):
            return [Job(case.key, size_bytes=1 << 20, ranks=(0, 1), memory="hbm")]

    plan = make_plan(cases="net_p2p", repeats=2, usable_cpus=1, llc_bytes=None,
                     memory_available_bytes=None)
    (row,) = Runner(plan, {"mpi": BufferKinds(not_run=("net_p2p",))}, CONTEXT).run()
    assert (row.memory, row.status, row.device) == ("hbm", "waived", "rank0->rank1")


# Catches: collective cases no longer run before the rest
def test_collective_cases_run_before_every_other_case():
    from bwprof.plan import make_plan
    from bwprof.runner import RunContext, Runner
    from tests.test_runner import ScriptedExecutor

    measured = []

    class Collective(ScriptedExecutor):
        backend, collective = "mpi", True

        def jobs(self, case, plan):
            from bwprof.measurement import Job

            return [Job(case.key, size_bytes=MiB, ranks=(0, 1), memory="host")]

        def measure(self, case, job, plan):
            measured.append(case.key)
            return []

    class Local(ScriptedExecutor):
        def measure(self, case, job, plan):
            measured.append(case.key)
            return super().measure(case, job, plan)

    plan = make_plan(cases="ddr_triad,net_p2p", repeats=4, size="1MiB", usable_cpus=2,
                     llc_bytes=None, memory_available_bytes=None)
    assert plan.cases[0].key == "ddr_triad"  # the plan lists it first
    Runner(plan, {"host": Local(), "mpi": Collective()}, RunContext("r", "h")).run()
    assert measured[0] == "net_p2p" and "ddr_triad" in measured


def test_a_latency_case_gets_nanoseconds_per_load_and_its_fastest_sample_is_best():
    """A case whose metric is latency: work counts dependent loads, the value is the time of
    one load, and best is the lowest (the fastest sample), with no GB/s beside it."""
    from dataclasses import replace as replaced

    latency = replaced(get_case("ddr_copy"), key="lat_probe", metric="latency")

    class Chasing(ScriptedExecutor):
        def measure(self, case, job, plan):
            return [Measurement(seconds_per_op=(2e-6, 1e-6, 4e-6), bytes_per_op=64,
                                size_bytes=job.size_bytes, device="cpu", device_name="cpu",
                                direction="within", memory="ddr", valid=True, threads=1,
                                work_per_op=10.0)]

    plan = replaced(_plan("ddr_copy"), cases=(latency,))
    row = Runner(plan, {"host": Chasing()}, CONTEXT).run()[0]
    assert (row.metric, row.unit, row.higher_is_better) == ("latency", "ns", False)
    assert row.value_best == pytest.approx(100.0) and row.value_median == pytest.approx(200.0)
    assert row.gbps_best is None and row.peak_gbps is None and row.pct_of_peak is None
    assert row.work_per_op == 10.0 and row.bytes_per_op == 64


def test_a_measurement_that_cannot_become_a_row_is_an_error_row_of_its_own():
    """One bad measurement of a job (a flag outside the vocabulary) must not cost its
    siblings, nor stop the run at the writer."""
    class Flagging(ScriptedExecutor):
        def measure(self, case, job, plan):
            good, = super().measure(case, job, plan)
            from dataclasses import replace as replaced

            return [good, replaced(good, device="numa0", flags=frozenset({"l2_resdent"}))]

    sink = ListSink()
    rows = Runner(_plan("ddr_copy"), {"host": Flagging()}, CONTEXT, sink).run()
    assert [(r.device, r.status) for r in rows] == [("cpu", "ok"), ("numa0", "error")] * 2
    assert "l2_resdent" in rows[1].note and sink.rows == rows
    assert [len(t) for t in sink.timings] == [3, 0, 3, 0]


def test_a_case_cannot_declare_a_metric_no_time_gives():
    from dataclasses import replace as replaced

    with pytest.raises(ValueError, match="efficiency"):
        replaced(get_case("ddr_copy"), metric="efficiency")


# Catches: a sink that cannot take a row (a full disk) is outside every try: the runner kept
# the row as finished although it never reached the folder, and measured on
def test_a_sink_that_cannot_take_a_row_ends_the_run_with_the_rows_it_took():
    from bwprof.errors import OutputError

    class FullSink(ListSink):
        def add(self, row, seconds):
            if len(self.rows) == 3:
                raise OutputError("cannot write results.csv: No space left on device")
            super().add(row, seconds)

    sink = FullSink()
    executor = ScriptedExecutor()
    measured = []
    real_measure = executor.measure
    executor.measure = lambda case, job, plan: measured.append(job) or real_measure(
        case, job, plan)
    runner = Runner(_plan(), {"host": executor}, CONTEXT, sink)
    with pytest.raises(OutputError, match="No space left"):
        runner.run()
    assert runner.rows == sink.rows and len(sink.rows) == 3
    assert len(measured) == 4  # the fourth job's row did not fit: nothing measured after it


# Catches: a stop signal landing just after the sink wrote a row loses it from the run's
# rows, so the folder and the result disagree about what was measured
def test_a_stop_signal_while_a_row_is_written_waits_until_the_run_counts_it():
    import os
    import signal

    from bwprof import interrupts

    class SignalledSink(ListSink):
        def add(self, row, seconds):
            if len(self.rows) == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            super().add(row, seconds)

    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    interrupts.install()
    try:
        sink = SignalledSink()
        runner = Runner(_plan(), {"host": ScriptedExecutor()}, CONTEXT, sink)
        with pytest.raises(KeyboardInterrupt):
            runner.run()
        assert interrupts.received() == "SIGTERM"
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        interrupts.reset()
    assert len(sink.rows) == 2 and runner.rows == sink.rows


def test_a_copy_carries_its_copy_convention_figure_beside_its_own():
    """ddr_copy counts the array read and the array written (STREAM), so the bytes it copied,
    counted once as nvbandwidth counts them, give half its GB/s; a Triad copies nothing."""
    rows = Runner(_plan("ddr_copy,ddr_triad"), {"host": ScriptedExecutor()}, CONTEXT).run()
    copy = next(r for r in rows if r.case == "ddr_copy")
    triad = next(r for r in rows if r.case == "ddr_triad")
    assert copy.copy_gbps_best == pytest.approx(copy.gbps_best / 2)
    assert copy.copy_gbps_median == pytest.approx(copy.gbps_median / 2)
    assert triad.copy_gbps_best is None and triad.copy_gbps_median is None


def test_every_case_declares_what_it_copies():
    """A copy-convention copy copies what it counts, d2d_copy and the STREAM Copy kernels
    half of it; kernels that are no copy, latency chases and the overlap cases (their rows
    mix copies and a kernel) have no copy figure."""
    shares = {key: get_case(key).copy_share for key in (
        "h2d_pinned", "d2h_pageable", "bidir_pinned", "h2d_all", "p2p_copy", "p2p_bidir",
        "net_p2p", "d2d_copy", "hbm_copy", "ddr_copy", "hbm_triad", "hbm_scale", "ddr_dot",
        "lat_gpu", "lat_memcpy", "overlap_bidir_compute", "pipeline_chunked")}
    assert shares == {
        "h2d_pinned": 1.0, "d2h_pageable": 1.0, "bidir_pinned": 1.0, "h2d_all": 1.0,
        "p2p_copy": 1.0, "p2p_bidir": 1.0, "net_p2p": 1.0, "d2d_copy": 0.5, "hbm_copy": 0.5,
        "ddr_copy": 0.5, "hbm_triad": None, "hbm_scale": None, "ddr_dot": None,
        "lat_gpu": None, "lat_memcpy": None, "overlap_bidir_compute": None,
        "pipeline_chunked": None}


# Catches: a listener that takes them apart (`job_not_run`, as bwprof's own) given a job
# that cannot run as a started job, or counted in its total; and one without it (a
# caller's own, written before) no longer told of that job at all
def test_a_job_that_cannot_run_comes_apart_to_a_listener_that_takes_it():
    from bwprof.plan import make_plan

    plan = make_plan(cases="ddr_copy,h2d_pinned", repeats=2, usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=8 << 30)
    executors = {"host": ScriptedExecutor(), "gpu": UnavailableExecutor("cuda", "no GPU")}

    class Old:
        def __init__(self):
            self.events = []

        def start(self, total, estimate_s=None):
            self.events.append(("start", total))

        def job_started(self, job, left_s=None):
            self.events.append(("job", job.case))

        def job_finished(self, job, rows):
            self.events.append(("done", [row.status for row in rows]))

    class Apart(Old):
        def job_not_run(self, job, rows):
            self.events.append(("not run", job.case, [row.status for row in rows]))

    old, apart = Old(), Apart()
    Runner(plan, executors, CONTEXT, progress=old).run()
    Runner(plan, executors, CONTEXT, progress=apart).run()
    sizes = len(plan.host_array_bytes)
    assert old.events == [("start", sizes + 1), *[("job", "ddr_copy"), ("done", ["ok"])] * sizes,
                          ("job", "h2d_pinned"), ("done", ["skipped"])]
    assert apart.events == [("start", sizes), *[("job", "ddr_copy"), ("done", ["ok"])] * sizes,
                            ("not run", "h2d_pinned", ["skipped"])]
