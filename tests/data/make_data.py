"""Rebuild the run folders under tests/data/ (see README.md there).

    python tests/data/make_data.py             # derive the modified copies from sim-a
    python tests/data/make_data.py --measure   # first measure host-ddr and sim-a again
    python tests/data/make_data.py --h200 OUT/run   # replace h200-quick by a newer GPU check

`--measure` runs bwprof itself: `host-ddr` is a real host-DDR measurement of the machine it
runs on, `sim-a` a run of the simulated GPU backend (its GPU rows are not measurements). The
derived folders are deterministic edits of `sim-a`, so tests can check exact arithmetic:

- `sim-b-slower`: every `hbm_triad gpu1` and `d2h_pinned gpu0` time × 1.25 (figure -20%),
  `h2d_pinned gpu0` time × 1.02 (figure about -2%); CVs unchanged (all samples scaled).
- `sim-c-other-box`: another GPU model, driver, CUDA driver and bwprof version, as if run on
  another box; the figures are sim-a's.

Only results.csv, timings.csv and system.json are kept; tests render everything else.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KEEP = {"results.csv", "timings.csv", "system.json"}

# bwprof's default array size (4x the last-level cache, within free memory): the VMs this runs
# on range from a 32 MiB to a 480 MiB L3, and a fixed size would measure the cache on some.
HOST_RUN = ["--cases", "ddr_", "--repeats", "5"]
SIM_RUN = ["--simulate", "--preset", "quick", "--repeats", "2", "--size", "8MiB", "--cases",
           "ddr_triad,h2d_pinned,d2h_pinned,d2d_copy,hbm_triad,h2d_all,d2h_all,p2p_copy"]
SLOWER = {("hbm_triad", "gpu1"): 1.25, ("d2h_pinned", "gpu0"): 1.25,
          ("h2d_pinned", "gpu0"): 1.02}
OTHER_GPU = "simulated GPU, other model"


def measure(name: str, args: list[str]) -> None:
    target = HERE / name
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "bwprof", "run", *args, "--quiet", "--no-plots",
                    "--out", str(target)], cwd=ROOT, check=True)
    for path in target.iterdir():
        if path.name not in KEEP:
            path.unlink()


def _rewrite_csv(path: Path, edit) -> None:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns, rows = reader.fieldnames, list(reader)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(edit(row) for row in rows)


def _copy(name: str) -> Path:
    target = HERE / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(HERE / "sim-a", target)
    return target


def _new_run_id(target: Path, suffix: str) -> str:
    system = json.loads((target / "system.json").read_text())
    return f"{system['run_id']}-{suffix}"


def slower() -> None:
    target = _copy("sim-b-slower")
    run_id = _new_run_id(target, "slower")

    def scale(row: dict) -> dict:
        factor = SLOWER.get((row["case"], row["device"]))
        if factor and row["status"] == "ok":
            for column in ("time_median_s", "time_min_s"):
                row[column] = repr(float(row[column]) * factor)
            # Version 1 has gbps_* only; version 2 also value_* (the same figures).
            for column in ("gbps_median", "gbps_best", "value_median", "value_best"):
                if row.get(column):
                    row[column] = repr(float(row[column]) / factor)
            if row["pct_of_peak"]:
                row["pct_of_peak"] = repr(float(row["pct_of_peak"]) / factor)
        row["run_id"] = run_id
        return row

    def scale_timing(row: dict) -> dict:
        factor = SLOWER.get((row["case"], row["device"]))
        if factor:
            row["seconds_per_op"] = repr(float(row["seconds_per_op"]) * factor)
        row["run_id"] = run_id
        return row

    _rewrite_csv(target / "results.csv", scale)
    _rewrite_csv(target / "timings.csv", scale_timing)
    system = json.loads((target / "system.json").read_text())
    system["run_id"] = run_id
    (target / "system.json").write_text(json.dumps(system, indent=2) + "\n")


def other_box() -> None:
    target = _copy("sim-c-other-box")
    run_id = _new_run_id(target, "other-box")

    def rename(row: dict) -> dict:
        if row["backend"] == "simulated" and row["device_name"]:
            row["device_name"] = row["device_name"].replace("simulated GPU", OTHER_GPU)
        row["run_id"] = run_id
        return row

    _rewrite_csv(target / "results.csv", rename)
    _rewrite_csv(target / "timings.csv", lambda row: {**row, "run_id": run_id})
    system = json.loads((target / "system.json").read_text())
    system["run_id"] = run_id
    system["bwprof_version"] = "0.0.9"
    for device in system["gpus"]["devices"]:
        device["properties"]["name"] = OTHER_GPU
        device["metadata"].update(driver_version="999.99", cuda_driver_version="99.9")
    (target / "system.json").write_text(json.dumps(system, indent=2) + "\n")


H200_FILES = ("results.csv", "timings.csv", "system.json", "samples.csv", "timelines.json")
"""What h200-quick keeps of a run folder (the counter and timeline plots need the last two);
scripts/gpu_check.sh copies each of them into $OUT/run."""


def replace_h200(source: Path, target: Path | None = None) -> Path:
    """Replace h200-quick by the run folder a GPU check left ($OUT/run), after checking it is
    what the folder's README says: a finished run whose GPU rows were measured on an H200."""
    sys.path.insert(0, str(ROOT))
    from bwprof.cases import CASES_BY_KEY
    from bwprof.store.runfolder import load_run

    target = target or HERE / "h200-quick"
    run = load_run(source)
    gpu_cases = [key for key, case in CASES_BY_KEY.items() if case.target == "gpu"]
    gpu = run.results[run.results["case"].isin(gpu_cases)]
    backends = set(gpu["backend"])
    names = " ".join(str(n) for n in gpu["device_name"].unique())
    if backends != {"cuda"} or "H200" not in names:
        raise SystemExit(f"{source}: not an H200 run (GPU backends {sorted(backends)}, "
                         f"devices {names or 'none'})")
    if run.meta.state != "finished":
        raise SystemExit(f"{source}: the run is {run.meta.state}, not finished")
    missing = [name for name in H200_FILES if not (source / name).is_file()]
    if missing:
        raise SystemExit(f"{source}: missing {', '.join(missing)}")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in H200_FILES:
        shutil.copy2(source / name, target / name)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true",
                        help="measure host-ddr (real) and sim-a (simulated) again first")
    parser.add_argument("--h200", type=Path, metavar="RUN_DIR",
                        help="replace h200-quick by this run folder (a GPU check's OUT/run)")
    args = parser.parse_args()
    if args.h200:
        print(f"replaced {replace_h200(args.h200)}")
        return
    if args.measure:
        measure("host-ddr", HOST_RUN)
        measure("sim-a", SIM_RUN)
    slower()
    other_box()


if __name__ == "__main__":
    main()
