import io


def test_line_progress_names_each_job_with_its_place_for_a_log():
    from bwprof.measurement import Job
    from bwprof.progress import LineProgress

    log = io.StringIO()
    progress = LineProgress(log)
    progress.start(2)
    for job in (Job("ddr_copy", size_bytes=64 << 20, threads=2), Job("h2d_pinned", device=0)):
        progress.job_started(job)
        progress.job_finished(job, [])
    progress.stop()
    assert log.getvalue().splitlines() == ["[1/2 0:00] ddr_copy 64 MiB 2 threads",
                                           "[2/2 0:00] h2d_pinned gpu0"]
