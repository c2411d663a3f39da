"""A 100,000-character CPU, GPU or host name (a tampered or odd system.json) is shortened
wherever it is drawn or shown: in a plot's title matplotlib's text layout ran until the
process was killed. The files keep it whole."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from bwprof.coerce import NAME_CHARACTERS
from bwprof.render import plots
from bwprof.render.html import _identity
from bwprof.saved import load
from bwprof.store.runfolder import machine_line
from tests.conftest import DATA

CPU, GPU, HOST = "C" * 100_000, "G" * 100_000, "H" * 100_000


def _with_long_names(folder: Path) -> None:
    """system.json and results.csv of `folder` name its CPU and GPU with CPU and GPU."""
    system = json.loads((folder / "system.json").read_text())
    system["host"]["cpu_model"] = CPU
    for device in system["gpus"]["devices"]:
        device["properties"]["name"] = device["metadata"]["name"] = GPU
    (folder / "system.json").write_text(json.dumps(system))
    with (folder / "results.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    for row in rows:
        if row["device_name"]:
            row["device_name"] = CPU if row["backend"] == "host" else GPU
    with (folder / "results.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _long_named_meta():
    run = load(DATA / "sim-a")
    assert run.meta.host is not None
    devices = tuple(replace(d, properties=replace(d.properties, name=GPU))
                    for d in run.meta.gpus.devices)
    host = replace(run.meta.host, hostname=HOST, cpu_model=CPU)
    return run, replace(run.meta, host=host, gpus=replace(run.meta.gpus, devices=devices))


def test_the_machine_line_shortens_each_name():
    _, meta = _long_named_meta()
    line = machine_line(meta)
    assert len(line) < 4 * NAME_CHARACTERS
    assert "(100000 characters)" in line  # it says the name was longer


def test_a_plot_title_with_long_names_stays_a_plot_wide():
    run, meta = _long_named_meta()
    figure = plots.bandwidth_figure(run.results, meta)
    assert len(figure._suptitle.get_text()) < 5 * NAME_CHARACTERS
    assert figure.get_figwidth() < 40  # inches: the title once widened it to thousands


def test_the_page_shows_long_names_shortened():
    run, meta = _long_named_meta()
    run.meta = meta
    identity = _identity(run)
    shown = [identity["cpu"], identity["host"],
             *(gpu["name"] for gpu in identity["gpus"])]
    assert all(len(str(name)) < 2 * NAME_CHARACTERS for name in shown), shown


def test_report_with_plots_of_long_names_finishes_and_the_files_keep_them(run_copy):
    """The whole report, plots and page: seconds, not until killed."""
    folder = run_copy("h200-quick")
    _with_long_names(folder)
    done = subprocess.run([sys.executable, "-m", "bwprof", "report", str(folder), "--html"],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    report = folder / "report"
    assert (report / "bandwidth_vs_size.png").is_file()
    assert GPU not in (report / "report.html").read_text()
    assert GPU in (folder / "results.csv").read_text()  # the files keep the name whole
