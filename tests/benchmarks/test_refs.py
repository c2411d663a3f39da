"""The C yardsticks the benchmarks build are in the repository and build with the flags the
benchmarks use (and their headers give); each runs on a tiny size and prints its CSV."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import host_latency_vs_lat_ref, host_vs_stream_ref, refs

REPO = Path(__file__).resolve().parents[2]
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


def test_the_yardsticks_are_the_repositorys_own_sources():
    for source in (refs.STREAM_REF, refs.LAT_REF):
        assert source.is_file() and source.is_relative_to(REPO / "benchmarks" / "ref")
    assert host_vs_stream_ref.DEFAULT_REF == refs.STREAM_REF
    assert host_latency_vs_lat_ref.DEFAULT_REF == refs.LAT_REF
    # The build line each file's header gives is the one the benchmark uses.
    assert "gcc " + " ".join(refs.STREAM_FLAGS) in refs.STREAM_REF.read_text()
    assert "gcc " + " ".join(refs.LAT_FLAGS) in refs.LAT_REF.read_text()


@needs_gcc
def test_stream_ref_builds_and_validates_on_a_tiny_array(tmp_path):
    binary = host_vs_stream_ref.build_reference(refs.STREAM_REF, tmp_path)
    figures = host_vs_stream_ref.run_reference(binary, elements=4096, repeats=3, threads=1)
    assert set(figures) == set(host_vs_stream_ref.KERNELS)
    assert all(gbps > 0 for gbps in figures.values())


@needs_gcc
def test_lat_ref_builds_and_chases_the_smallest_working_sets(tmp_path):
    binary = host_latency_vs_lat_ref.build_reference(refs.LAT_REF, tmp_path)
    out = subprocess.run([str(binary), str(8192), "1"], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    rows = list(csv.DictReader(out.splitlines()))
    assert [int(row["size_bytes"]) for row in rows] == [4096, 8192]
    assert all(float(ns) > 0 for ns in host_latency_vs_lat_ref.parse_reference(out).values())
