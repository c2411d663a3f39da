import io


def test_line_progress_names_each_job_with_its_place_for_a_log():
    from bwprof.measurement import Job
    from bwprof.render.progress import LineProgress

    log = io.StringIO()
    progress = LineProgress(log)
    progress.start(2)
    for job in (Job("ddr_copy", size_bytes=64 << 20, threads=2), Job("h2d_pinned", device=0)):
        progress.job_started(job)
        progress.job_finished(job, [])
    progress.stop()
    assert log.getvalue().splitlines() == ["[1/2 0:00] ddr_copy 64 MiB 2 threads",
                                           "[2/2 0:00] h2d_pinned gpu0"]


def test_each_line_says_how_long_is_left_by_the_plan_s_estimate():
    from bwprof.measurement import Job
    from bwprof.render.progress import LineProgress

    log = io.StringIO()
    progress = LineProgress(log)
    progress.start(2, estimate_s=95.0)
    progress.job_started(Job("ddr_copy", size_bytes=64 << 20, threads=2), left_s=90.0)
    progress.job_finished(Job("ddr_copy"), [])
    progress.job_started(Job("lat_host", size_bytes=4096, threads=1), left_s=65.4)
    assert log.getvalue().splitlines() == [
        "[1/2 0:00, about 1:30 left] ddr_copy 64 MiB 2 threads",
        "[2/2 0:00, about 1:05 left] lat_host 4 KiB 1 threads"]


def test_the_time_left_follows_the_run_s_pace_once_it_settles():
    from bwprof.render.progress import time_left
    from bwprof.units import clock

    assert time_left(100.0, 60.0, 2.0) == 60.0  # a few seconds in: the estimate as it is
    assert time_left(100.0, 60.0, 80.0) == 120.0  # 40 s of work took 80: twice as slow
    assert time_left(100.0, 60.0, 20.0) == 30.0  # twice as fast
    assert time_left(100.0, 60.0, 400.0) == 180.0  # held at 3x
    assert time_left(None, None, 10.0) is None
    assert [clock(s) for s in (0, 59.9, 65, 3723)] == ["0:00", "0:59", "1:05", "1:02:03"]


# Catches: a case that cannot run here counted and shown as a job ("[32/69] h2d_pinned" on a
# machine without a GPU, after a plan line of 30 jobs), as if it were measured
def test_a_log_counts_and_names_only_the_jobs_that_measure():
    from bwprof.executor import UnavailableExecutor
    from bwprof.plan import make_plan
    from bwprof.render.progress import LineProgress
    from bwprof.runner import RunContext, Runner
    from tests.test_runner import ScriptedExecutor

    plan = make_plan(cases="ddr_copy,h2d_pinned,hbm_triad", repeats=2, usable_cpus=2,
                     llc_bytes=None, memory_available_bytes=8 << 30)
    log = io.StringIO()
    executors = {"host": ScriptedExecutor(), "gpu": UnavailableExecutor("cuda", "no GPU")}
    rows = Runner(plan, executors, RunContext("run", "host"), progress=LineProgress(log)).run()
    lines = log.getvalue().splitlines()
    measured = [row for row in rows if row.case == "ddr_copy"]
    assert len(lines) == len(measured) > 0
    assert all(line.startswith(f"[{n}/{len(measured)} ") and "ddr_copy" in line
               for n, line in enumerate(lines, 1))
    assert {row.status for row in rows if row.case != "ddr_copy"} == {"skipped"}
