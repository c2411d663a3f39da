"""Tests of bwprof.numbaenv that need a fresh process: numba reads its variables once, and
starts its threading layer once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`bwprof run` of one small host case with `env` added."""
    return subprocess.run(
        [sys.executable, "-m", "bwprof", "run", "--cases", "ddr_triad", "--size", "8MiB",
         "--threads", "1", "--repeats", "2", "--quiet", "--no-plots", "--out",
         str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env})


@pytest.mark.parametrize("layer", ["nosuch", "tbb"])
def test_a_threading_layer_numba_cannot_start_is_one_line_before_the_run(tmp_path, layer):
    """Unknown ('nosuch') or not installed here (TBB): every host case became an error row
    and the run exited 1; now nothing is written."""
    pytest.importorskip("numba")
    if layer == "tbb":
        try:
            import numba.np.ufunc.tbbpool  # noqa: F401
            pytest.skip("TBB is installed here")
        except ImportError:
            pass
    done = _run(tmp_path, NUMBA_THREADING_LAYER=layer)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: numba cannot start its threads with "
                                  f"NUMBA_THREADING_LAYER='{layer}' set (")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_threading_layer_numba_has_runs(tmp_path):
    done = _run(tmp_path, NUMBA_THREADING_LAYER="workqueue")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "results.csv").is_file()
