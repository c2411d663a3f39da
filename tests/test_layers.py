"""The layers of DESIGN.md ("Layers") held against the code: reading a saved run folder loads
no measuring code and no GPU library, bwprof's modules import each other without a circle,
and no module imports a layer above its own except the exceptions listed here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

DATA = Path(__file__).parent / "data"

GPU_LIBRARIES = ("numba", "cupy", "pynvml", "llvmlite")
CATALOGUE_DECLARATIONS = {"bwprof.gpu", "bwprof.gpu.cases", "bwprof.gpu.layout",
                          "bwprof.gpu.kernel_params", "bwprof.host", "bwprof.host.cases"}
"""What of bwprof/gpu and bwprof/host the catalogue loads: the case tables (their run
functions named, not imported) and the plain data they declare with."""
MEASURING = ("bwprof.gpu", "bwprof.host", "bwprof.telemetry", "bwprof.runner",
             "bwprof.executor", "bwprof.estimate", "bwprof.budget", "bwprof.chain")

READ_ONLY_COMMANDS = textwrap.dedent("""
    import contextlib, io, json, sys
    from bwprof.cli import main

    data, out = sys.argv[1], sys.argv[2]
    commands = [
        ["report", f"{data}/h200-quick", "--no-plots", "--out", f"{out}/h200"],
        ["report", f"{data}/host-ddr", "--no-plots", "--out", f"{out}/host"],
        ["accept", f"{data}/h200-quick", f"{data}/host-ddr"],
        ["compare", f"{data}/h200-quick", f"{data}/host-ddr"],
        ["history", "add", f"{data}/h200-quick", f"{data}/host-ddr", "--store", f"{out}/store"],
        ["trend", "--store", f"{out}/store", "--no-plots"],
    ]
    codes = {}
    for argv in commands:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            codes[" ".join(argv[:2])] = main(argv)
    print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
""")


def _measuring(name: str) -> bool:
    if name.split(".")[0] in GPU_LIBRARIES:
        return True
    if name in CATALOGUE_DECLARATIONS:
        return False
    return any(name == prefix or name.startswith(prefix + ".") for prefix in MEASURING)


def test_measuring_names_what_the_old_catalogue_loaded() -> None:
    # The check itself: what `bwprof.cases` loaded before its run functions were named lazily.
    assert _measuring("bwprof.gpu.transfers") and _measuring("bwprof.host.latency")
    assert _measuring("numba.core") and _measuring("pynvml")
    assert not _measuring("bwprof.gpu.cases") and not _measuring("bwprof.report.summary")


def test_reading_a_saved_folder_loads_no_measuring_code(tmp_path: Path) -> None:
    """`report`, `accept`, `compare`, `history add` and `trend` on saved folders, in a fresh
    interpreter: no numba, CuPy or NVML, and no GPU or host measuring module, is imported."""
    done = subprocess.run([sys.executable, "-c", READ_ONLY_COMMANDS, str(DATA), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    # Every command ran (accept on a CPU-only folder beside an H200 one may judge FAIL: 1).
    assert set(result["codes"].values()) <= {0, 1}, result["codes"]
    assert result["codes"]["report " + str(DATA / "h200-quick")] == 0
    assert "bwprof.report.runfolder" in result["modules"]  # the folders were read here
    loaded = [name for name in result["modules"] if _measuring(name)]
    assert loaded == [], f"reading a saved folder imported {loaded}"
