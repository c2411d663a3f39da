"""Every GPU case driven through the real runner, registry, validation and rows on the
simulated backend. Simulated timings are never checked as figures: only the bookkeeping."""

import itertools
import json
from dataclasses import replace

import numpy
import pytest

import bwprof
from bwprof.cases import get_case
from bwprof.gpu import hbm
from bwprof.gpu.devices import describe
from bwprof.gpu.executor import SIMULATED_NOTE, GpuExecutor
from bwprof.gpu.kernel_params import STATE_LOAD_BYTES
from bwprof.gpu.sim import SimBackend, SimDeviceArray
from bwprof.host import stream
from bwprof.measurement import Job
from bwprof.plan import make_plan
from bwprof.runner import RunContext, Runner
from bwprof.units import MiB
from tests.conftest import small_simulated_gpus

GPU_CASES = ("h2d_pinned,d2h_pinned,h2d_pageable,d2h_pageable,bidir_pinned,d2d_copy,hbm_,"
             "h2d_all,d2h_all,h2d_all_bidir,one_to_all,all_to_one,p2p_all_pairs,p2p_copy,"
             "p2p_bidir,h2d_sm,d2h_sm,d2d_sm,p2p_read,p2p_read_sm,p2p_write_sm,p2p_bidir_sm,"
             "lat_gpu,lat_gpu_loaded,lat_h2d,lat_p2p,lat_memcpy")


def _plan(cases, preset="quick", repeats=2):
    """The preset's sizes, with every GPU and pair swept and pageable copies run on past the
    host's cache, as `standard` does (the quick preset's own thinning has its tests)."""
    return replace(make_plan(cases=cases, preset=preset, repeats=repeats, usable_cpus=2,
                             llc_bytes=None, memory_available_bytes=8 << 30, size="1MiB"),
                   sweep_gpus="all", pairs="all", past_host_cache=True)


def _run(backend, cases, preset="quick"):
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    runner = Runner(_plan(cases, preset), {"gpu": executor}, RunContext("r", "h"))
    try:
        return runner.run()
    finally:
        runner.close()


@pytest.fixture(scope="module")
def simulated_run(tmp_path_factory):
    # No plots (drawing them took half this fixture's 11 s: one test below draws them), and
    # 16 MiB simulated GPUs, so the sweep stops at 1 MiB (5 s to 3 s).
    out = tmp_path_factory.mktemp("sim") / "run"
    with pytest.MonkeyPatch.context() as patch:
        small_simulated_gpus(patch, 16 * MiB)
        return bwprof.run(cases=GPU_CASES, preset="quick", repeats=2, out=out, simulate=True,
                          plots=False)


def test_every_gpu_case_runs_and_is_labelled_simulated(simulated_run):
    frame = simulated_run.results
    assert set(frame["case"]) == {
        "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable", "bidir_pinned",
        "d2d_copy", "hbm_copy", "hbm_scale", "hbm_add", "hbm_triad", "hbm_dot", "h2d_all",
        "d2h_all", "h2d_all_bidir", "one_to_all", "all_to_one", "p2p_all_pairs", "p2p_copy",
        "p2p_bidir", "h2d_sm", "d2h_sm", "d2d_sm", "p2p_read", "p2p_read_sm", "p2p_write_sm",
        "p2p_bidir_sm", "lat_gpu", "lat_gpu_loaded", "lat_h2d", "lat_p2p", "lat_memcpy"}
    ok = frame[frame["status"] == "ok"]
    assert (ok["backend"] == "simulated").all()
    assert ok["note"].str.contains(SIMULATED_NOTE, regex=False).all()
    assert set(frame["status"]) == {"ok", "skipped"}
    assert simulated_run.failed == []
    system = json.loads((simulated_run.run_dir / "system.json").read_text())
    assert system["simulated"] is True
    assert system["gpus"]["simulated"] is True and len(system["gpus"]["devices"]) == 2


def test_every_gpu_cases_rows_draw_their_plots(simulated_run):
    """The run above writes no plots (the fixture's time): the rows of every GPU case still
    draw, each figure whose rows it has (host, telemetry and timeline figures it has none of)."""
    from bwprof.render import plots
    from bwprof.render.plotcache import is_plot_name
    from bwprof.saved import load

    written = plots.write_plots(load(simulated_run.run_dir))
    assert [p.name for p in written] == [
        plots.BANDWIDTH_PNG, plots.SUMMARY_PNG, plots.P2P_PNG, plots.LATENCY_PNG,
        plots.LOADED_LATENCY_PNG, plots.P2P_LATENCY_PNG]
    assert all(p.stat().st_size > 10_000 for p in written)
    assert all(is_plot_name(p.name) for p in written)  # PLOT_FILES lists every fixed plot


def test_sizes_that_do_not_fit_are_skipped_with_the_reason(simulated_run):
    frame = simulated_run.results
    skipped = frame[frame["status"] == "skipped"]
    assert set(skipped["size_bytes"]) == {16 * MiB, 256 * MiB}  # on 16 MiB simulated GPUs
    assert all(f"{size >> 20} MiB does not fit" in note
               for size, note in zip(skipped["size_bytes"], skipped["note"], strict=True))
    ok = frame[(frame["case"] == "h2d_pinned") & (frame["status"] == "ok")]
    assert sorted(set(ok["size_bytes"])) == [64 << 10, MiB]
    assert set(ok["device"]) == {"gpu0", "gpu1"}


def test_row_shapes_per_case(simulated_run):
    frame = simulated_run.results
    at = frame[(frame["size_bytes"] == MiB) & (frame["status"] == "ok")]

    def rows(case):
        return at[at["case"] == case]

    bidir = rows("bidir_pinned")
    assert list(bidir["direction"]) == ["h2d", "d2h", "both"] * 2
    both = bidir[bidir["direction"] == "both"].iloc[0]
    assert both["bytes_per_op"] == 2 * MiB and both["streams"] == 2
    every = rows("h2d_all")
    assert list(every["device"]) == ["gpu0", "gpu1", "all"]
    assert every.iloc[-1]["bytes_per_op"] == 2 * MiB
    assert list(rows("h2d_all_bidir")["device"]) == ["all"]
    assert rows("h2d_all_bidir").iloc[0]["bytes_per_op"] == 4 * MiB  # 2 GPUs x 2 ways
    # gpu1: the matrix size only; per GPU the copy engine's row and the SM kernels'.
    assert list(rows("one_to_all")["device"]) == ["gpu0->all"] * 2
    assert list(rows("all_to_one")["device"]) == ["all->gpu0"] * 2
    for key in ("one_to_all", "all_to_one"):
        assert list(rows(key)["phase"]) == ["copy_engine", "sm"], key
        assert (rows(key)["bytes_per_op"] == MiB).all(), key  # 1 peer
    for key, rows_of in (("bidir_pinned", 2), ("p2p_bidir", 2), ("p2p_bidir_sm", 2),
                         ("h2d_all", 2)):
        each = rows(key).iloc[:rows_of]  # the measured rows; the sum comes last
        assert each["note"].str.contains("interfering copies doubled").all(), key
    assert list(rows("p2p_all_pairs")["device"]) == ["all"]
    assert rows("p2p_all_pairs").iloc[0]["bytes_per_op"] == 2 * MiB  # 2 ordered pairs
    assert list(rows("p2p_copy")["device"]) == ["gpu0->gpu1"]  # others: the matrix size only
    p2p = simulated_run.results[simulated_run.results["case"] == "p2p_copy"]
    assert set(p2p[p2p["device"] == "gpu1->gpu0"]["size_bytes"]) == {256 * MiB}
    assert list(rows("p2p_bidir")["device"]) == ["gpu0->gpu1", "gpu1->gpu0", "gpu0<->gpu1"]
    d2d = rows("d2d_copy").iloc[0]
    assert d2d["bytes_per_op"] == 2 * MiB and d2d["byte_convention"] == "traffic"
    assert "copy figure (bytes copied once)" in d2d["note"]
    assert (rows("h2d_pinned")["ops_per_sample"] >= 1).all()
    assert (rows("h2d_pinned")["repeats"] == 2).all()
    for key, engine in (("h2d_sm", "h2d_pinned"), ("d2h_sm", "d2h_pinned")):
        sm = rows(key)
        assert list(sm["device"]) == ["gpu0", "gpu1"], key
        assert list(sm["direction"]) == list(rows(engine)["direction"]), key
        assert (sm["bytes_per_op"] == MiB).all() and (sm["streams"] == 1).all(), key
        assert sm["note"].str.contains("SM copy kernel, 32 blocks").all(), key
    d2d_sm = rows("d2d_sm").iloc[0]
    assert d2d_sm["bytes_per_op"] == 2 * MiB and d2d_sm["byte_convention"] == "traffic"
    assert "copy figure (bytes copied once)" in d2d_sm["note"]
    for key in ("p2p_read", "p2p_read_sm", "p2p_write_sm"):
        assert list(rows(key)["device"]) == ["gpu0->gpu1"], key
        assert list(rows(key)["direction"]) == ["p2p"], key
        whole = simulated_run.results[simulated_run.results["case"] == key]
        assert set(whole[whole["device"] == "gpu1->gpu0"]["size_bytes"]) == {256 * MiB}, key
    assert "copy engine on the destination GPU" in rows("p2p_read").iloc[0]["note"]
    assert "SM kernel on the destination GPU" in rows("p2p_read_sm").iloc[0]["note"]
    assert "SM kernel on the source GPU" in rows("p2p_write_sm").iloc[0]["note"]
    bidir_sm = rows("p2p_bidir_sm")
    assert list(bidir_sm["device"]) == ["gpu0->gpu1", "gpu1->gpu0", "gpu0<->gpu1"]
    assert list(bidir_sm["bytes_per_op"]) == [MiB, MiB, 2 * MiB]


def test_latency_row_shapes_per_case(simulated_run):
    frame = simulated_run.results
    lat = frame[frame["case"].str.startswith("lat_")]
    assert (lat["status"] == "ok").all(), lat[["case", "note"]]
    assert (lat["metric"] == "latency").all() and (lat["unit"] == "ns").all()
    assert lat["gbps_best"].isna().all() and (lat["value_best"] > 0).all()
    l2 = SimBackend().properties(0).l2_bytes
    sweep = frame[(frame["case"] == "lat_gpu") & (frame["device"] == "gpu0")]
    sizes = list(sweep["size_bytes"])
    assert sizes[0] == 4 << 10 and sizes[-1] >= 4 * l2 and sizes == sorted(sizes)
    assert list(sweep["cache_level"]) == ["L1" if s <= 64 << 10 else "L2" if s <= l2 else "HBM"
                                          for s in sizes]
    assert (sweep["memory"] == "hbm").all() and (sweep["direction"] == "within").all()
    # The runner's ns per load: one sample's time over its loads.
    assert (sweep["work_per_op"] == sweep["bytes_per_op"] / 8).all()
    assert sweep["note"].str.contains("event-timed", regex=False).all()
    flagged = sweep["flags"].str.contains("l2_resident")
    assert list(flagged) == [s < 4 * l2 for s in sizes]
    loaded = frame[(frame["case"] == "lat_gpu_loaded") & (frame["device"] == "gpu0")]
    assert list(loaded["phase"]) == ["load_0", "load_12", "load_25", "load_50", "load_100"]
    assert (loaded["cache_level"] == "HBM").all() and (loaded["size_bytes"] >= 4 * l2).all()
    assert (loaded["load_gbps"] >= 0).all()  # the simulated load runs after the chase: 0
    host = frame[frame["case"] == "lat_h2d"]
    # Per GPU the headline (nvbandwidth's host_device_latency_sm: 2 MiB, in address order,
    # no phase), then the random set beyond 4x the L2, labelled random_tlb.
    assert list(host["device"]) == ["gpu0", "gpu0", "gpu1", "gpu1"]
    assert list(host["phase"].fillna("")) == ["", "random_tlb"] * 2
    assert list(host["size_bytes"])[:2] == [2 * MiB, max(host["size_bytes"])]
    assert (host["size_bytes"].iloc[1::2] >= 4 * l2).all()
    assert host["note"].iloc[0::2].str.contains("host_device_latency_sm", regex=False).all()
    assert host["note"].iloc[1::2].str.contains("TLB misses", regex=False).all()
    assert set(host["memory"]) == {"pinned"} and set(host["direction"]) == {"h2d"}
    p2p = frame[frame["case"] == "lat_p2p"]
    assert list(p2p["device"]) == ["gpu0->gpu1", "gpu1->gpu0"]
    assert set(p2p["memory"]) == {"hbm"} and set(p2p["direction"]) == {"p2p"}
    copies = frame[frame["case"] == "lat_memcpy"]
    assert list(zip(copies["device"], copies["direction"], copies["memory"], strict=True)) == [
        (d, direction, memory) for d in ("gpu0", "gpu1")
        for direction, memory in (("h2d", "pinned"), ("d2h", "pinned"), ("within", "hbm"))]
    # One int4, as cuda-samples' p2pBandwidthLatencyTest times latency (not 4 bytes).
    assert (copies["size_bytes"] == 16).all() and (copies["work_per_op"] == 1).all()
    assert copies["note"].str.contains("cudaMemcpyAsync of 16 bytes", regex=False).all()


def _latency_rows(backend, cases):
    return [r for r in _run(backend, cases) if r.status != "skipped"]


class StepDroppingBackend(SimBackend):
    """Every chase launch walks one load fewer than asked: the ending index must show it."""

    def launch(self, kernel, stream, *args, blocks=None):
        if kernel == "chase":
            chain, state, steps = args
            args = (chain, state, max(0, int(steps) - 1))
        super().launch(kernel, stream, *args, blocks=blocks)


@pytest.mark.parametrize("case", ["lat_gpu", "lat_gpu_loaded", "lat_h2d", "lat_p2p"])
def test_a_chase_that_lost_loads_is_invalid(case):
    rows = _latency_rows(StepDroppingBackend(), case)
    assert rows and all(r.status == "invalid" for r in rows), [(r.status, r.note) for r in rows]
    assert all("validation failed: the chase ended at address" in r.note for r in rows)


class CachingLinkBackend(SimBackend):
    """A chase's time per load, modelled: a chain of up to CACHED bytes is a GPU cache's after
    its first lap (COLD_S a load until every line was loaded once, HIT_S after), a larger one
    is the link's at every load (COLD_S)."""

    CACHED, COLD_S, HIT_S = 2 * MiB, 1.5e-6, 0.3e-6
    models_load_times = True  # its sample times are the model's, so the cache check runs

    def __init__(self, **options):
        super().__init__(**options)
        self.loaded: dict[int, int] = {}
        self.clock = 0.0

    def launch(self, kernel, stream, *args, blocks=None):
        if kernel == "chase":
            chain, steps = args[0], int(args[2])
            lines = chain.nbytes // 128
            key = int(numpy.asarray(chain).__array_interface__["data"][0])
            done = self.loaded.get(key, 0)
            cold = steps if chain.nbytes > self.CACHED else max(0, min(steps, lines - done))
            self.clock += cold * self.COLD_S + (steps - cold) * self.HIT_S
            self.loaded[key] = done + steps
        super().launch(kernel, stream, *args, blocks=blocks)

    def time_sample(self, works, gate, hold_us):
        self.clock = 0.0
        sample = super().time_sample(works, gate, hold_us)
        return replace(sample, seconds=(self.clock,)) if self.clock else sample


def test_a_host_chase_served_from_a_gpu_cache_after_its_first_lap_is_flagged():
    """lat_h2d's 2 MiB headline, cached after its first lap (5x faster), is flagged
    `cache_served` (a cache's figure: never the host-link headline) and says why; the random
    set, never cached, is not. The same chases at the link's speed throughout: no flag."""
    rows = _latency_rows(CachingLinkBackend(devices=1), "lat_h2d")
    assert [r.phase for r in rows] == ["", "random_tlb"]
    headline, random = rows
    assert headline.status == "ok" and "cache_served" in headline.flags
    assert "served from a GPU cache after the first lap: 300 ns per load" in headline.note
    # The first lap: 14,336 of its 16,384 lines cold (the probe loaded the other 2,048).
    assert "under 0.6 x the first (cold) lap's 1350 ns" in headline.note
    assert "cache_served" not in random.flags and "served from a GPU cache" not in random.note
    assert "rotates the walking SM" in headline.note  # not quite nvbandwidth's walk

    class UncachedLink(CachingLinkBackend):
        CACHED = 0

    uncached = _latency_rows(UncachedLink(devices=1), "lat_h2d")
    assert [r.status for r in uncached] == ["ok", "ok"]
    assert not any("cache_served" in r.flags for r in uncached)
    # The plain simulated backend's CPU times (its CPU caches serve the 2 MiB chain) are not
    # held against anything: simulated rows are never figures, nor flagged cache_served.
    class CpuTimed(CachingLinkBackend):
        models_load_times = False

    assert not any("cache_served" in r.flags
                   for r in _latency_rows(CpuTimed(devices=1), "lat_h2d"))


class LaunchCountingBackend(SimBackend):
    def __init__(self, **options):
        super().__init__(**options)
        self.chases = 0

    def launch(self, kernel, stream, *args, blocks=None):
        self.chases += kernel == "chase"
        super().launch(kernel, stream, *args, blocks=blocks)


@pytest.mark.parametrize("case", ["lat_gpu", "lat_h2d"])
def test_a_chain_with_a_link_outside_its_buffer_is_refused_before_any_chase(case, monkeypatch):
    """A wild link would be an illegal address on a GPU (a sticky error that poisons the
    context for every later case): the host checks every link before upload, the job ends
    with an error row naming it, no chase is launched and the run goes on."""
    from bwprof.gpu import latency

    built = latency.chain_addresses

    def corrupted(next_lines, base):
        words = built(next_lines, base)
        words[latency.NODE_WORDS] += numpy.uint64(len(next_lines) * latency.NODE_BYTES)
        return words

    monkeypatch.setattr(latency, "chain_addresses", corrupted)
    backend = LaunchCountingBackend(devices=1)
    rows = _latency_rows(backend, f"{case},lat_memcpy")
    chased = [r for r in rows if r.case == case]
    assert chased and all(r.status == "error" for r in chased), [(r.status, r.note)
                                                                  for r in chased]
    assert all("chain check failed before any kernel ran: 1 of" in r.note for r in chased)
    assert all("(line 1 links to" in r.note for r in chased)
    assert backend.chases == 0
    assert [r.status for r in rows if r.case == "lat_memcpy"] == ["ok"] * 3


class CorruptingMemcpyBackend(SimBackend):
    def copy(self, dst, src, nbytes, stream):
        super().copy(dst, src, nbytes - 1, stream)


def test_a_wrong_small_copy_is_invalid():
    rows = _latency_rows(CorruptingMemcpyBackend(devices=1), "lat_memcpy")
    assert [r.status for r in rows] == ["invalid"] * 3
    assert all("validation failed: 1 of 16 bytes" in r.note for r in rows)


class CountingOnlyLoadBackend(SimBackend):
    """The load counts the bytes of its passes but stores none of them."""

    def launch(self, kernel, stream, *args, blocks=None):
        if kernel == "load":
            src, state = args[0], args[2]
            numpy.asarray(state)[STATE_LOAD_BYTES] += numpy.uint64(numpy.asarray(src).nbytes * 2)
            return
        super().launch(kernel, stream, *args, blocks=blocks)


def test_a_load_that_stores_nothing_is_invalid():
    """Zeros pass the check after the chase (a stopped block leaves them); the one pass of
    the load alone must copy every byte."""
    rows = _latency_rows(CountingOnlyLoadBackend(devices=1), "lat_gpu_loaded")
    loaded = [r for r in rows if r.phase != "load_0"]
    assert loaded and all(r.status == "invalid" for r in loaded)
    assert all("after one pass of it alone" in r.note for r in loaded)
    assert [r.status for r in rows if r.phase == "load_0"] == ["ok"]


def test_the_real_load_passes_its_one_pass_check():
    rows = _latency_rows(SimBackend(devices=1), "lat_gpu_loaded")
    assert rows and all(r.status == "ok" for r in rows), [(r.status, r.note) for r in rows]


def test_lat_p2p_is_waived_with_one_gpu():
    (row,) = _run(SimBackend(devices=1), "lat_p2p")
    assert (row.status, row.note) == ("waived", "needs 2 GPUs; this machine has 1")


def test_the_full_preset_sweeps_the_chase_by_twos():
    backend = SimBackend(devices=1)
    executor = GpuExecutor(backend, describe(backend))
    quick = [j.size_bytes for j in executor.jobs(get_case("lat_gpu"), _plan("lat_gpu"))]
    full = [j.size_bytes for j in executor.jobs(get_case("lat_gpu"),
                                                _plan("lat_gpu", preset="full"))]
    assert quick == [4 << 10 << 2 * k for k in range(len(quick))]
    assert full == [4 << 10 << k for k in range(len(full))] and full[-1] == quick[-1]


def test_a_chase_set_is_labelled_hbm_only_where_it_is_not_l2_resident():
    """The full preset's 2x steps put a set between the L2 and 4x it (2 MiB on a 1 MiB
    simulated L2): flagged l2_resident, so never labelled HBM (it read `HBM`)."""
    rows = [r for r in _run(SimBackend(devices=1), "lat_gpu", preset="full") if r.status == "ok"]
    l2 = SimBackend().properties(0).l2_bytes
    assert any(l2 < r.size_bytes < 4 * l2 for r in rows), [r.size_bytes for r in rows]
    for row in rows:
        resident = "l2_resident" in row.flags
        assert (row.cache_level == "HBM") == (not resident), (row.size_bytes, row.cache_level)
        if l2 < row.size_bytes < 4 * l2:
            assert row.cache_level == "L2+HBM"


@pytest.mark.parametrize(("size", "level"), [
    (64 << 10, "L1"), (256 << 10, "L2"), (60 * MiB, "L2"), (64 * MiB, "L2+HBM"),
    (239 * MiB, "L2+HBM"), (240 * MiB, "HBM"), (256 * MiB, "HBM")])
def test_cache_levels_on_an_h200s_60_mib_l2(size, level):
    """An H200's L2 is 60 MiB: its 64 MiB set is under 4x the L2 (flagged l2_resident), so
    it is not HBM's; the 256 MiB set is."""
    from types import SimpleNamespace

    from bwprof.gpu.latency import cache_level

    h200 = SimpleNamespace(properties=SimpleNamespace(l2_bytes=60 * MiB))
    assert cache_level(size, h200) == level


def test_hbm_rows_use_the_default_array_size(simulated_run):
    frame = simulated_run.results
    rows = frame[frame["case"].str.startswith("hbm_")]
    # 16 MiB of simulated memory: 2^25 float64 does not fit, so it halves to 4 MiB.
    assert set(rows["size_bytes"]) == {4 * MiB}
    assert (rows[rows["case"] == "hbm_triad"]["bytes_per_op"] == 3 * 4 * MiB).all()
    assert (rows["status"] == "ok").all()


def test_p2p_is_waived_with_one_gpu():
    rows = _run(SimBackend(devices=1), "p2p_,h2d_all")
    p2p = [r for r in rows if r.case.startswith("p2p")]
    assert [r.case for r in p2p] == ["p2p_all_pairs", "p2p_copy", "p2p_bidir", "p2p_read",
                                     "p2p_read_sm", "p2p_write_sm", "p2p_bidir_sm"]
    assert [(r.status, r.note) for r in p2p] == [("waived", "needs 2 GPUs; this machine has 1")] * 7
    assert {r.device for r in rows if r.case == "h2d_all" and r.status == "ok"} == {"gpu0", "all"}


class CorruptingBackend(SimBackend):
    """Drops the last byte of every copy: validation must notice."""

    def copy(self, dst, src, nbytes, stream):
        super().copy(dst, src, nbytes - 1, stream)


@pytest.mark.parametrize("case", ["h2d_pinned", "d2h_pageable", "d2d_copy", "p2p_copy",
                                  "p2p_read"])
def test_a_corrupted_copy_is_invalid(case):
    rows = [r for r in _run(CorruptingBackend(), case) if r.size_bytes == MiB]
    assert rows and all(r.status == "invalid" for r in rows)
    assert all("validation failed: 1 of 1048576 bytes" in r.note for r in rows)


class CorruptingSmBackend(SimBackend):
    """Every SM copy leaves its last 8-byte element unwritten: validation must notice."""

    def launch(self, kernel, stream, *args, blocks=None):
        if kernel != "sm_copy":
            return super().launch(kernel, stream, *args, blocks=blocks)
        src, dst = args
        return super().launch(kernel, stream, src[:-1], dst[:-1], blocks=blocks)


@pytest.mark.parametrize("case", ["h2d_sm", "d2h_sm", "d2d_sm", "p2p_read_sm", "p2p_write_sm",
                                  "p2p_bidir_sm"])
def test_a_corrupted_sm_copy_is_invalid(case):
    rows = [r for r in _run(CorruptingSmBackend(), case) if r.size_bytes == MiB]
    assert rows and all(r.status == "invalid" for r in rows)
    assert all("validation failed: " in r.note for r in rows)


def test_sm_copies_launch_a_grid_that_fills_the_gpu(monkeypatch):
    """The simulated GPU has 4 SMs: a 16 MiB copy gets 8 blocks on each, a 64 KiB one the
    blocks that give each thread its four elements."""
    from bwprof.gpu.kernel_params import SM_COPY_BLOCKS_PER_SM

    grids = []

    class Recording(SimBackend):
        def launch(self, kernel, stream, *args, blocks=None):
            if kernel == "sm_copy":
                grids.append((args[0].size * 8, blocks))
            return super().launch(kernel, stream, *args, blocks=blocks)

    rows = _run(Recording(devices=1), "d2d_sm")
    assert {r.status for r in rows} == {"ok", "skipped"}
    assert dict(grids) == {64 << 10: 8, MiB: 4 * SM_COPY_BLOCKS_PER_SM,
                           16 * MiB: 4 * SM_COPY_BLOCKS_PER_SM}


class CrossWiredBackend(SimBackend):
    """Every host-to-device copy reads the first host buffer it was ever given, as if every
    GPU's stream were wired to gpu0's buffer: validation must notice on every other GPU."""

    def __init__(self):
        super().__init__()
        self.first_source = {}  # per size: the host buffer of the first copy of that size

    def copy(self, dst, src, nbytes, stream):
        if not isinstance(src, SimDeviceArray) and isinstance(dst, SimDeviceArray):
            src = self.first_source.setdefault(nbytes, src)
        super().copy(dst, src, nbytes, stream)


def test_a_copy_from_another_gpus_host_buffer_is_invalid():
    rows = [r for r in _run(CrossWiredBackend(), "h2d_all") if r.size_bytes == MiB]
    status = {r.device: r.status for r in rows}
    assert status["gpu0"] == "ok" and status["gpu1"] == "invalid"
    assert "validation failed" in next(r.note for r in rows if r.device == "gpu1")


def test_results_overwritten_after_timing_are_invalid(monkeypatch):
    """The real-GPU test's scenario on the simulated backend, so CI runs its code too."""
    from tests.gpu.corrupt import rows_with_results_corrupted

    rows = [row for row in rows_with_results_corrupted(SimBackend(), monkeypatch)
            if row.status != "skipped"]  # 256 MiB is more than the simulated GPU holds
    assert {row.case for row in rows} == {"h2d_pinned", "hbm_triad"}
    assert all(row.status == "invalid" and "validation failed" in row.note for row in rows), [
        (row.case, row.size_bytes, row.status, row.note) for row in rows]


def test_a_wrong_kernel_is_invalid(monkeypatch):
    def broken_triad(a, b, c, scalar):
        a[:] = b + scalar * c
        a[0] = -1.0

    monkeypatch.setitem(stream.KERNELS, "triad",
                        stream.StreamKernel("triad", broken_triad, stream.KERNELS["triad"].replay))
    (row, *_) = _run(SimBackend(devices=1), "hbm_triad")
    assert row.status == "invalid"
    assert "1 of" in row.note and "elements of a" in row.note


def test_hbm_array_sizes():
    device = describe(SimBackend())[0]
    sizes, note = hbm.array_sizes(device, free_bytes=80 << 30, sweep=False)
    assert sizes == [hbm.DEFAULT_ARRAY_BYTES] and note == ""
    big_l2 = type(device)(0, type(device.properties)(**{**device.properties.__dict__,
                                                       "l2_bytes": 100 * MiB}))
    assert hbm.array_sizes(big_l2, 80 << 30, False)[0] == [512 * MiB]  # >= 4x L2, power of 2
    sizes, note = hbm.array_sizes(device, free_bytes=80 << 30, sweep=True)
    assert sizes[0] == hbm.MIN_SWEEP_BYTES and sizes[-1] == hbm.DEFAULT_ARRAY_BYTES
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))
    tiny, note = hbm.array_sizes(big_l2, free_bytes=256 * MiB, sweep=False)
    assert tiny == [64 * MiB] and "below 4x" in note


def test_hbm_sizes_count_the_previous_cases_buffers_as_free():
    """They are released before the HBM case runs, so they must not shrink its arrays."""
    def hbm_sizes(held_bytes):
        backend = SimBackend()
        executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
        held = executor.pool.device(0, held_bytes, 0) if held_bytes else None
        sizes = [job.size_bytes for job in executor.jobs(get_case("hbm_copy"), _plan("hbm_"))]
        del held
        return sizes

    assert hbm_sizes(48 * MiB) == hbm_sizes(0)


def test_full_preset_sweeps_hbm_copy_through_the_cache():
    executor = GpuExecutor(SimBackend(devices=1), describe(SimBackend(devices=1)))
    jobs = executor.jobs(get_case("hbm_copy"), _plan("hbm_copy", preset="full"))
    assert next(j.size_bytes for j in jobs) == hbm.MIN_SWEEP_BYTES
    assert len(executor.jobs(get_case("hbm_triad"), _plan("hbm_triad", preset="full"))) == 1


def test_simulated_runs_never_show_figures_in_the_terminal(tmp_path):
    from typer.testing import CliRunner

    from bwprof.cli import app

    result = CliRunner().invoke(app, ["run", "--simulate", "--preset", "quick", "--repeats", "2",
                                      "--cases", "h2d_pinned,hbm_triad", "--no-plots", "--out",
                                      str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    # h2d_pinned: the 3 sizes that fit on gpu0 (256 MiB is skipped), the largest that fits
    # (16 MiB) on gpu1; hbm_triad on each.
    assert "simulated 6 GPU row(s)" in result.output
    assert "GB/s best" not in result.output  # no measured rows, so no figures table
    assert "--simulate" not in CliRunner().invoke(app, ["run", "--help"]).output
    import pandas as pd

    assert (pd.read_csv(tmp_path / "r" / "timings.csv")["seconds_per_op"] > 0).all()


def test_p2p_sweeps_sizes_on_the_first_pair_and_the_matrix_at_one_size():
    backend = SimBackend(devices=3)
    executor = GpuExecutor(backend, describe(backend))
    jobs = executor.jobs(get_case("p2p_copy"), _plan("p2p_copy", preset="standard"))
    first = [j.size_bytes for j in jobs if (j.device, j.peer) == (0, 1)]
    assert first == list(_plan("p2p_copy", preset="standard").transfer_sizes)
    others = {(j.device, j.peer): j.size_bytes for j in jobs if (j.device, j.peer) != (0, 1)}
    assert set(others) == {(0, 2), (1, 0), (1, 2), (2, 0), (2, 1)}
    assert set(others.values()) == {256 * MiB}
    bidir = executor.jobs(get_case("p2p_bidir"), _plan("p2p_bidir", preset="quick"))
    assert {(j.device, j.peer) for j in bidir} == {(0, 1), (0, 2), (1, 2)}


@pytest.mark.parametrize("key", ["p2p_copy", "p2p_bidir"])
def test_a_gpu_changing_role_between_pairs_holds_only_the_buffers_of_its_role(key):
    """Source of one pair and target of the next: the buffer of its old role is freed first, so
    the fit check, which counts one role's buffers, is what the GPU really holds."""
    size = 4 * MiB
    case = get_case(key)
    buffers = case.needs(case, Job(key, size_bytes=size)).device_bytes // size
    backend = SimBackend(devices=3, memory_bytes=int(1.5 * buffers * size / 0.9))
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    plan = _plan(key, preset="quick")
    first, second = case.pair_slots
    assert len(first) == len(second) == buffers
    pairs = [(i, j) for i, j in itertools.permutations(range(3), 2)
             if key == "p2p_copy" or i < j]
    for i, j in pairs:
        rows = executor.measure(get_case(key), Job(key, size_bytes=size, device=i, peer=j), plan)
        assert rows and all(r.valid for r in rows)
        held = {d: sorted(k[2] for k in executor.pool._arrays if k[:2] == ("device", d))
                for d in (i, j)}
        assert held == {i: list(first), j: list(second)}
        assert all(executor.pool.device_bytes(d) == len(held[d]) * size for d in (i, j))


def _executor_with(backend, **device_fields):
    devices = [replace(d, **device_fields) for d in describe(backend)]
    return GpuExecutor(backend, devices, host_memory_bytes=8 << 30)


def _run_executor(executor, cases, preset="quick"):
    runner = Runner(_plan(cases, preset), {"gpu": executor}, RunContext("r", "h"))
    try:
        return runner.run()
    finally:
        runner.close()


def test_a_figure_above_its_peak_is_invalid_unless_it_fits_in_l2():
    executor = _executor_with(SimBackend(devices=1), peak_pcie_gbps=1e-6, peak_hbm_gbps=1e-6)
    rows = [r for r in _run_executor(executor, "h2d_pinned,hbm_copy", preset="full")
            if r.status != "skipped"]
    h2d = [r for r in rows if r.case == "h2d_pinned"]
    assert h2d and all(r.status == "invalid" for r in h2d)
    assert all("figure above the theoretical peak" in r.note for r in h2d)
    hbm = {r.size_bytes: r for r in rows if r.case == "hbm_copy"}
    assert hbm[256 << 10].status == "ok" and "fits in L2" in hbm[256 << 10].note
    assert hbm[16 * MiB].status == "invalid"  # 16 MiB >= 4 x the 1 MiB simulated L2


class UngatedBackend(SimBackend):
    def time_sample(self, works, gate, hold_us):
        return replace(super().time_sample(works, gate, hold_us), covered=not gate)


def test_an_aggregate_across_gpus_needs_samples_the_gate_held():
    rows = _run(UngatedBackend(), "h2d_all,p2p_bidir")
    ok = [r for r in rows if r.status == "ok"]
    # Each GPU's and each direction's own figure stays; only the sums across them go.
    assert {r.device for r in ok} >= {"gpu0", "gpu1", "gpu0->gpu1", "gpu1->gpu0"}
    assert not [r for r in rows if r.device in ("all", "gpu0<->gpu1")]
    assert all("aggregate not reported" in r.note for r in ok)


def test_rows_do_not_claim_a_numa_node_that_placement_could_not_enforce():
    backend = SimBackend(devices=1)
    backend.placement_failed = True
    rows = _run_executor(_executor_with(backend, numa_node=1), "h2d_pinned")
    ok = [r for r in rows if r.status == "ok"]
    assert ok and all(r.numa_node is None and "placement not enforced" in r.note for r in ok)
    placed = _run_executor(_executor_with(SimBackend(devices=1), numa_node=1), "h2d_pageable")
    assert {r.numa_node for r in placed if r.status == "ok"} == {1}
    assert all("pageable: each copy is synchronous" in r.note for r in placed
               if r.status == "ok")


def test_a_copy_within_the_gpu_names_no_numa_node_and_no_host_placement():
    """d2d_copy and the overlap cases' kernel rows touch no host memory: like the HBM
    kernels they have no node to claim, and refused CPU affinity says nothing about them."""
    rows = _run_executor(_executor_with(SimBackend(devices=1), numa_node=1),
                         "d2d_copy,h2d_pinned")
    ok = [r for r in rows if r.status == "ok"]
    assert {r.numa_node for r in ok if r.case == "d2d_copy"} == {None}
    assert {r.numa_node for r in ok if r.case == "h2d_pinned"} == {1}  # host copies keep it
    overlap = _run_executor(_executor_with(SimBackend(devices=1), numa_node=1),
                            "overlap_h2d_compute")
    nodes = {(r.direction, r.numa_node) for r in overlap if r.status == "ok"}
    assert nodes == {("h2d", 1), ("compute", None), ("h2d+compute", 1)}  # the kernel: none
    refused = SimBackend(devices=1)
    refused.placement_failed = True
    rows = _run_executor(_executor_with(refused, numa_node=1), "d2d_copy")
    d2d = [r for r in rows if r.status == "ok"]
    assert d2d and not any("placement" in r.note for r in d2d)


def test_rows_do_not_claim_a_numa_node_their_host_memory_did_not_land_on(monkeypatch):
    """Host buffers are read back after allocation: one whose pages lie mostly elsewhere
    (its node short of free memory) makes the GPU's rows claim no node, until the case ends."""
    import os

    from bwprof.gpu import buffers

    shares = {1: 0.4, 0: 1.0}
    monkeypatch.setattr(buffers, "node_share", lambda arrays, node: shares[node])
    cpus = frozenset(os.sched_getaffinity(0))
    off = _run_executor(_executor_with(SimBackend(devices=1), numa_node=1, cpus=cpus),
                        "h2d_pinned")
    ok = [r for r in off if r.status == "ok"]
    assert ok and all(r.numa_node is None for r in ok)
    assert all("host memory not on NUMA node 1: 40% of its sampled pages there" in r.note
               for r in ok)
    on = _run_executor(_executor_with(SimBackend(devices=1), numa_node=0, cpus=cpus),
                       "h2d_pinned,d2h_pinned")
    assert {r.numa_node for r in on if r.status == "ok"} == {0}


@pytest.mark.parametrize("nodes", [2, 0, 1])
def test_rows_say_when_their_host_memory_could_not_be_located(monkeypatch, nodes):
    """Pinned memory is a driver's mapping the kernel may not locate: the row keeps the node it
    asked for and says it was not read back, also where the system lists no nodes (gVisor);
    on a one-node machine there is nothing to say."""
    import os

    from bwprof.gpu import buffers

    monkeypatch.setattr(buffers, "node_share", lambda arrays, node: None)
    cpus = frozenset(os.sched_getaffinity(0))
    executor = _executor_with(SimBackend(devices=1), numa_node=1, cpus=cpus)
    executor.numa_node_count = nodes
    ok = [r for r in _run_executor(executor, "h2d_pinned,d2d_copy") if r.status == "ok"]
    h2d = [r for r in ok if r.case == "h2d_pinned"]
    assert h2d and {r.numa_node for r in h2d} == {1}
    unread = "host memory asked of NUMA node 1; where its pages landed could not be read back"
    assert all((unread in r.note) == (nodes != 1) for r in h2d)
    assert not any(unread in r.note for r in ok if r.case == "d2d_copy")  # no host memory


def test_large_rows_get_a_counter_window_only_while_telemetry_samples(monkeypatch):
    from bwprof.gpu import executor as gpu_executor

    monkeypatch.setattr(gpu_executor, "COUNTER_WINDOW_MIN_BYTES", 16 * MiB)
    backend = SimBackend(devices=1)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    plan = _plan("h2d_pinned", repeats=3)
    case = get_case("h2d_pinned")
    small, large = (next(j for j in executor.jobs(case, plan) if j.size_bytes == size)
                    for size in (MiB, 16 * MiB))

    def measured(job):
        (row,) = executor.measure(case, job, plan)
        assert row.valid, row.note
        return row, 1 + (plan.repeats) * row.ops_per_sample

    def samples_only(row, timed):
        """The timed samples' ops, the estimate's one, and the untimed warm-up ops behind
        each sample's gate (one for the estimate, 1 to WARMUP_OPS for every timed sample,
        as many as the first op's time asked for)."""
        from bwprof.gpu.sampling import WARMUP_OPS

        warmups = row.window_ops - timed - 1
        per_sample = warmups // plan.repeats
        return warmups % plan.repeats == 0 and 1 <= per_sample <= WARMUP_OPS

    row, timed = measured(large)
    assert samples_only(row, timed)  # telemetry off: the window is the timed samples'
    executor.counter_window_s = 0.05
    row, timed = measured(large)
    assert row.window_ops > 0 and row.window_s[1] - row.window_s[0] >= 0.05
    assert len(row.seconds_per_op) == plan.repeats  # timed samples only in the figure
    row, timed = measured(small)
    assert samples_only(row, timed)  # below the size that earns a window


def test_pageable_copies_are_staged_from_the_gpus_numa_node():
    """The host stages a pageable copy: h2d_pageable and overlap_pageable both run it on the
    CPUs of the GPU's node (pinned copies need no host thread)."""
    import os

    one_cpu = frozenset({min(os.sched_getaffinity(0))})
    seen: dict[str, set[frozenset[int]]] = {}

    class Recording(SimBackend):
        case = ""

        def copy(self, dst, src, nbytes, stream):
            seen.setdefault(self.case, set()).add(frozenset(os.sched_getaffinity(0)))
            super().copy(dst, src, nbytes, stream)

    backend = Recording(devices=1)
    executor = _executor_with(backend, numa_node=0, cpus=one_cpu)
    for case in ("h2d_pageable", "overlap_pageable"):
        backend.case = case
        rows = _run_executor(executor, case)
        assert any(r.status == "ok" for r in rows), [(r.status, r.note) for r in rows]
    assert seen["h2d_pageable"] == {one_cpu}
    assert seen["overlap_pageable"] == {one_cpu}


def test_counter_windows_go_to_each_sweeps_largest_size_and_the_p2p_matrix(monkeypatch):
    from bwprof.gpu import cases as gpu_cases
    from bwprof.gpu import executor as gpu_executor
    from bwprof.measurement import NotRun

    monkeypatch.setattr(gpu_executor, "COUNTER_WINDOW_MIN_BYTES", 64 << 10)
    monkeypatch.setattr(gpu_cases, "P2P_MATRIX_BYTES", 4 * MiB)
    backend = SimBackend(devices=3)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    executor.counter_window_s = 0.01
    plan = _plan("h2d_pinned,p2p_copy,p2p_bidir,hbm_copy", preset="standard")
    earns = {}
    for key in ("h2d_pinned", "p2p_copy", "p2p_bidir", "hbm_copy"):
        case = get_case(key)
        for job in executor.jobs(case, plan):
            try:
                executor._check_fits(case, job)  # as measure() does first
            except NotRun:
                continue
            earns[(key, job.device, job.peer, job.size_bytes)] = executor._earns_window(
                case, job, plan)
    windowed = {k for k, v in earns.items() if v}
    hbm_largest = executor.hbm_sizes(executor.devices[0], plan)[0][-1]
    pairs = [(i, j) for i in range(3) for j in range(3) if i != j]
    assert windowed == (  # standard: the first GPU's and the first pair's largest size
        {("h2d_pinned", 0, None, 16 * MiB)}  # 16 MiB: the largest that fits
        | {("p2p_copy", 0, 1, 16 * MiB)}  # the first pair's sweep
        | {("p2p_bidir", 0, 1, 16 * MiB)}  # both ways: the first pair's sweep only
        | {("hbm_copy", 0, None, hbm_largest)})
    full = replace(plan, preset="full")  # full: every GPU, and every pair at the matrix size
    assert {k for k in earns if executor._earns_window(get_case(k[0]), Job(
        k[0], size_bytes=k[3], device=k[1], peer=k[2]), full)} == (
        {("h2d_pinned", d, None, 16 * MiB) for d in range(3)}
        | {("p2p_copy", 0, 1, 16 * MiB)}
        | {("p2p_copy", i, j, 4 * MiB) for i, j in pairs}
        | {("p2p_bidir", 0, 1, 16 * MiB)}
        | {("hbm_copy", d, None, hbm_largest) for d in range(3)})
    quick = replace(plan, preset="quick")  # quick: the paths' headline cases alone
    assert {k[0] for k in earns if executor._earns_window(get_case(k[0]), Job(
        k[0], size_bytes=k[3], device=k[1], peer=k[2]), quick)} == {"h2d_pinned", "p2p_copy"}
    executor.counter_window_s = 0.0  # telemetry off: no windows at all
    assert not executor._earns_window(get_case("h2d_pinned"),
                                      executor.jobs(get_case("h2d_pinned"), plan)[2], plan)


def test_hbm_arrays_between_l2_and_four_times_l2_are_noted():
    device = describe(SimBackend())[0]
    big_l2 = replace(device, properties=replace(device.properties, l2_bytes=100 * MiB))
    sizes, note = hbm.array_sizes(big_l2, free_bytes=1 << 30, sweep=False)
    assert sizes == [256 * MiB] and "below 4x" in note  # 256 MiB: above L2, under 4x


def test_a_figure_over_1_05_times_its_peak_is_invalid_and_under_it_is_not():
    from bwprof.measurement import Measurement

    backend = SimBackend(devices=1)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)

    def checked(nbytes):
        return executor._checked(get_case("h2d_pinned"), Measurement(
            seconds_per_op=(1.0, 2.0), bytes_per_op=nbytes, size_bytes=nbytes, device="gpu0",
            device_name="simulated GPU", direction="h2d", memory="pinned", valid=True,
            peak=1.0))

    assert checked(int(1.5e9)).valid is False
    assert checked(int(1.04e9)).valid is True
    executor.close()


# Catches: a fleet rank holding one GPU of its node waives p2p as "this machine has 1" and
# labels one GPU's copies as every GPU at once
def test_a_rank_holding_part_of_its_node_waives_the_whole_node_cases():
    from bwprof.api import gpu_executor

    executor, gpus = gpu_executor(simulate=True, only=[1])
    assert [d.index for d in executor.devices] == [1] and gpus.used == (1,)
    assert [d.index for d in gpus.devices] == [1]
    for key in ("h2d_all", "d2h_all", "p2p_copy", "p2p_bidir"):
        reason = executor.unavailable_reason(get_case(key))
        assert reason is not None and reason.status == "waived", key
        assert "this rank holds gpu1 of its node's 2 GPUs" in reason.reason
        assert "one rank per node" in reason.reason
    assert executor.unavailable_reason(get_case("h2d_pinned")) is None
    # The whole node: nothing waived for that reason.
    whole, _ = gpu_executor(simulate=True)
    assert whole.unavailable_reason(get_case("h2d_all")) is None


# -- pageable copies and the host's cache (issue 24) ----------------------------------------------

def _pageable_executor(llc, source="sysfs", thp="madvise", host_memory=8 << 30, **backend):
    from bwprof.gpu.executor import HostCache

    sim = SimBackend(devices=1, **backend)
    return GpuExecutor(sim, describe(sim), host_memory_bytes=host_memory,
                       host_cache=HostCache(llc, source, thp))


def _sizes_and_notes(executor, key, transfer_sizes):
    plan = replace(_plan(key), transfer_sizes=transfer_sizes)
    return [(j.size_bytes, j.note) for j in executor.jobs(get_case(key), plan)]


@pytest.mark.parametrize("key", ["h2d_pageable", "d2h_pageable"])
def test_pageable_rows_under_4x_the_host_llc_are_in_cache_with_their_page_size(key, monkeypatch):
    from bwprof.gpu import buffers
    from bwprof.host.placement import Pages

    monkeypatch.setattr(buffers, "backing_pages",
                        lambda arrays: Pages(2 * MiB, 1.0, "2 MiB transparent huge pages"))
    executor = _pageable_executor(MiB)  # a tiny LLC: 4x is 4 MiB
    executor._devices = [replace(d, peak_pcie_gbps=1e-6) for d in executor.devices]
    plan = replace(_plan(f"{key},h2d_pinned"), transfer_sizes=(64 << 10, MiB))
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    try:
        rows = runner.run()
    finally:
        runner.close()
    pageable = {r.size_bytes: r for r in rows if r.case == key}
    # The sweep runs on past the transfer sizes, by the preset's step cut at 4x the LLC.
    assert sorted(pageable) == [64 << 10, MiB, 4 * MiB]
    for size, row in pageable.items():
        assert row.page_bytes == 2 * MiB
        assert "host buffer in 2 MiB transparent huge pages (transparent huge pages: madvise)" \
            in row.note
        assert ("in_cache" in row.flags) == (size < 4 * MiB)
    for size in (64 << 10, MiB):  # a cache's figure: no peak beside it, but the link bounds it
        assert pageable[size].peak_value is None
        assert "under 4x the host's last-level cache (1 MiB)" in pageable[size].note
        assert pageable[size].status == "invalid"  # every byte crossed a 1e-6 GB/s link
    largest = pageable[4 * MiB]
    assert largest.status == "invalid" and "figure above the theoretical peak" in largest.note
    assert largest.peak_value is not None
    assert "sweep run on past the preset's sizes to 4 MiB" in largest.note
    pinned = [r for r in rows if r.case == "h2d_pinned"]  # the driver's: read where it can be
    assert pinned and all(r.page_bytes == 2 * MiB and "in_cache" not in r.flags
                          and "transparent huge pages" not in r.note for r in pinned)


def test_the_pageable_sweep_stops_where_memory_ends_and_says_why():
    # 4x an 8 MiB LLC is 32 MiB: 256 MiB does not fit the simulated GPU, so 16 MiB is last.
    quick = _sizes_and_notes(_pageable_executor(8 * MiB), "h2d_pageable",
                             (64 << 10, MiB, 16 * MiB, 256 * MiB))
    assert [size for size, _ in quick] == [64 << 10, MiB, 16 * MiB, 256 * MiB]
    notes = dict(quick)
    assert notes[16 * MiB] == ("sweep ends under 4x the host's last-level cache (32 MiB): "
                               "256 MiB does not fit: needs 256 MiB on gpu0, more than 90% of "
                               "the 64 MiB free")
    assert not notes[64 << 10] and not notes[MiB] and not notes[256 * MiB]
    # A size past the preset's that does not fit host memory is not run at all.
    short = _sizes_and_notes(_pageable_executor(8 * MiB, host_memory=40 * MiB), "d2h_pageable",
                             (64 << 10, MiB, 16 * MiB))
    assert [size for size, _ in short] == [64 << 10, MiB, 16 * MiB]
    assert short[-1][1].endswith("32 MiB does not fit: needs 32 MiB of host memory")
    # Room enough: on by 16x from 1 MiB, the last step cut at 32 MiB.
    room = _sizes_and_notes(_pageable_executor(8 * MiB, memory_bytes=1 << 30), "h2d_pageable",
                            (64 << 10, MiB))
    assert [size for size, _ in room] == [64 << 10, MiB, 16 * MiB, 32 * MiB]
    assert "to 32 MiB: at least 4x the host's last-level cache (8 MiB)" in room[-1][1]
    # Standard's step is 4x; an LLC the transfer sizes already pass adds nothing.
    standard = _sizes_and_notes(_pageable_executor(8 * MiB, memory_bytes=1 << 30),
                                "h2d_pageable", (MiB, 4 * MiB))
    assert [size for size, _ in standard] == [MiB, 4 * MiB, 16 * MiB, 32 * MiB]
    assert _sizes_and_notes(_pageable_executor(MiB), "h2d_pageable",
                            (MiB, 16 * MiB)) == [(MiB, ""), (16 * MiB, "")]


def test_pageable_rows_are_cache_unknown_where_the_llc_is_not_from_sysfs():
    def flags_by_size(executor):
        rows = _run_executor(executor, "h2d_pageable")
        return {r.size_bytes: r.flags for r in rows if r.status == "ok"}

    cpuid = flags_by_size(_pageable_executor(MiB, source="cpuid"))
    assert {s: ("in_cache" in f, "cache_unknown" in f) for s, f in cpuid.items()} == {
        64 << 10: (True, False), MiB: (True, False), 16 * MiB: (False, True)}
    unknown = flags_by_size(_pageable_executor(None, source=None, thp=None))
    assert sorted(unknown) == [64 << 10, MiB, 16 * MiB]  # no LLC: the transfer sizes alone
    assert all("cache_unknown" in f and "in_cache" not in f for f in unknown.values())


def test_overlap_pageable_is_raised_to_4x_the_host_llc_where_it_fits():
    def job(llc, memory):
        (found,) = _pageable_executor(llc, memory_bytes=memory).jobs(
            get_case("overlap_pageable"), _plan("overlap_pageable"))
        return found.size_bytes, found.note

    size, note = job(100 * MiB, 4 << 30)  # 256 MiB is under 4x 100 MiB
    assert size == 512 * MiB and "raised from 256 MiB to 4x" in note
    size, note = job(100 * MiB, 512 * MiB)
    assert size < 400 * MiB and "under 4x the host's last-level cache (400 MiB)" in note
    assert job(MiB, 4 << 30) == (256 * MiB, "")
    pinned = _pageable_executor(100 * MiB, memory_bytes=4 << 30).jobs(
        get_case("overlap_h2d_compute"), _plan("overlap_h2d_compute"))
    assert [j.size_bytes for j in pinned] == [256 * MiB]  # pinned memory: not the host's cache


def test_the_run_gives_the_gpu_executor_the_hosts_cache_and_thp_mode():
    from bwprof.api import gpu_executor
    from bwprof.system import host_info

    host = host_info()
    executor, _ = gpu_executor(simulate=True, host=host)
    cache = executor.host_cache
    assert (cache.llc_bytes, cache.source, cache.transparent_hugepages) == (
        host.llc_bytes_total, host.cache_source, host.transparent_hugepages)
    assert executor.sharing(executor.devices, "x").host_cache == cache


def test_rows_name_an_inherited_memory_policy_that_overrides_their_node(monkeypatch):
    """numactl --membind=0 around a GPU of node 1: host buffers follow the operator's policy,
    so the rows claim no node and say what overrode it."""
    from contextlib import contextmanager

    from bwprof.gpu import buffers
    from bwprof.host.mempolicy import Placement

    @contextmanager
    def bound(node):
        yield Placement(False, f"the process's memory policy bind:0 overrides NUMA node {node}")

    monkeypatch.setattr(buffers.mempolicy, "preferred_node", bound)
    monkeypatch.setattr(buffers, "node_share", lambda arrays, node: 1.0)
    rows = _run_executor(_executor_with(SimBackend(devices=1), numa_node=1), "h2d_pinned,d2d_copy")
    h2d = [r for r in rows if r.status == "ok" and r.case == "h2d_pinned"]
    assert h2d and all(r.numa_node is None and "numa_unverified" in r.flags for r in h2d)
    assert all("host memory not asked of NUMA node 1: the process's memory policy bind:0"
               in r.note for r in h2d)
    assert not any("numa_unverified" in r.flags for r in rows if r.case == "d2d_copy")


def test_host_buffers_are_allocated_under_their_nodes_memory_policy(monkeypatch):
    from contextlib import contextmanager

    from bwprof.gpu import buffers
    from bwprof.host.mempolicy import Placement

    asked: list[int | None] = []

    @contextmanager
    def preferred(node):
        asked.append(node)
        yield Placement(True)

    monkeypatch.setattr(buffers.mempolicy, "preferred_node", preferred)
    rows = _run_executor(_executor_with(SimBackend(devices=1), numa_node=1), "h2d_pinned")
    assert asked and set(asked) == {1}
    assert {r.numa_node for r in rows if r.status == "ok"} == {1}


# -- a GPU that stops answering ----------------------------------------------------------------


def _fake_cuda_backend(devices=2, memory_bytes=4 * MiB):
    """CudaBackend on the fake CUDA of tests/gpu/fake_cuda.py: it moves bytes, so copy cases
    validate, and it stalls what a stalled GPU would."""
    from bwprof.gpu.runtime import CudaBackend
    from tests.gpu.fake_cuda import FakeCuda

    fake = FakeCuda(devices=devices, memory_bytes=memory_bytes, pinned_limit_bytes=256 * MiB)
    return CudaBackend(cupy=fake.cupy, numba_cuda=fake.numba_cuda), fake


@pytest.fixture
def tiny_deadline(monkeypatch):
    """Every wait on a GPU bounded by 0.5 s (the rule's floor), whatever the job's plan: a
    healthy memset or upload in a helper thread finishes well within it on a loaded CPU."""
    from bwprof.gpu import job

    monkeypatch.setattr(job, "DEADLINE_FLOOR_S", 0.5)
    monkeypatch.setattr(job, "DEADLINE_MULTIPLE", 0.0)


def _h2d_rows_with_gpu1_stalled(fake, rows_source):
    fake.stall(1)
    try:
        return rows_source()
    finally:
        fake.unblock.set()  # nothing should be hung on it; if it were, it fails now


# Catches: a wait on a stalled GPU without a deadline (the run hangs), a wedged GPU used again
# (each of its jobs would wait out the deadline, and release() would synchronise it for ever)
def test_a_gpu_that_stops_answering_ends_its_job_in_an_error_row_and_is_skipped_after(
        tiny_deadline):
    import time

    backend, fake = _fake_cuda_backend()
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    plan = replace(_plan("h2d_pinned", preset="standard"), transfer_sizes=(64 << 10, 1 << 20))
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    began = time.monotonic()

    def run():
        try:
            return runner.run()
        finally:
            assert not runner.close()  # released without synchronising the wedged GPU

    rows = _h2d_rows_with_gpu1_stalled(fake, run)
    assert time.monotonic() - began < 20
    assert [(r.device, r.status) for r in rows] == [
        ("gpu0", "ok"), ("gpu0", "ok"), ("gpu1", "error"), ("gpu1", "skipped")]
    # A wedged GPU runs nothing: the first work queued on it, the gate, is what stalled.
    assert rows[2].note == ("GpuTimeout: gpu1 gate (hold kernel) did not finish within 0.5 s; "
                            "gpu1 not used again in this run")
    assert rows[3].note == ("gpu1 stopped answering earlier in this run (gpu1 gate (hold "
                            "kernel) did not finish within 0.5 s): not used again, nor "
                            "synchronised")
    assert not [e for e in fake.log if e[0] == "hung"]


def test_a_run_whose_gpu_stops_answering_exits_1_with_every_row_kept(
        tiny_deadline, monkeypatch, tmp_path):
    """`bwprof run` on the fake CUDA: the stalled GPU's job is an error row, the rows before
    it are in results.csv, and the run exits with error rows' documented code (1)."""
    from typer.testing import CliRunner

    from bwprof.cli import app
    from bwprof.errors import EXIT_FAILED
    from bwprof.gpu import runtime
    from bwprof.schema.table import read_results

    backend, fake = _fake_cuda_backend()
    monkeypatch.setattr(runtime, "probe", lambda: runtime.GpuProbe(2))
    monkeypatch.setattr(runtime, "CudaBackend", lambda: backend)
    out = tmp_path / "run"
    result = _h2d_rows_with_gpu1_stalled(fake, lambda: CliRunner().invoke(app, [
        "run", "--cases", "h2d_pinned", "--preset", "quick", "--repeats", "2", "--out",
        str(out), "--no-telemetry", "--no-plots", "--quiet"]))
    assert result.exit_code == EXIT_FAILED, result.output
    frame = read_results(out / "results.csv")
    statuses = list(zip(frame["device"], frame["status"], strict=True))
    assert ("gpu1", "error") in statuses
    first_error = statuses.index(("gpu1", "error"))
    assert first_error > 0 and all(s in {"ok", "skipped"} for _, s in statuses[:first_error])
    assert ("gpu0", "ok") in statuses[:first_error]
    error = frame.iloc[first_error]
    assert "gpu1 gate (hold kernel) did not finish within 0.5 s" in error["note"]
    assert not [e for e in fake.log if e[0] == "hung"]


# Catches: planning a case after a GPU stopped answering calling that GPU (free_bytes ->
# free_memory -> the pool's cudaFree, which synchronises it: the main thread hangs for ever)
def test_a_case_planned_after_a_gpu_stopped_answering_never_calls_that_gpu(tiny_deadline):
    """64 MiB rows with counter windows, the first GPU swept (quick's rule): gpu1 stalls in
    h2d_pinned; d2h_pinned's window check re-expands the case, asking every GPU's free
    memory. The run goes on to its end without a call that waits on gpu1."""
    import time

    backend, fake = _fake_cuda_backend(memory_bytes=256 * MiB)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    executor.counter_window_s = 0.05
    plan = replace(_plan("h2d_pinned,d2h_pinned", preset="standard"),
                   transfer_sizes=(64 * MiB,), sweep_gpus="first")
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    began = time.monotonic()

    def run():
        try:
            return runner.run()
        finally:
            assert not runner.close()

    rows = _h2d_rows_with_gpu1_stalled(fake, run)
    assert time.monotonic() - began < 25
    assert [(r.case, r.device, r.status) for r in rows] == [
        ("h2d_pinned", "gpu0", "ok"), ("h2d_pinned", "gpu1", "error"),
        ("d2h_pinned", "gpu0", "ok"), ("d2h_pinned", "gpu1", "skipped")]
    assert "gpu1 stopped answering" in rows[3].note
    assert not [e for e in fake.log if e[0] == "hung"]
    assert backend.free_memory(1) == 0  # asked again: no call reaches gpu1


# Catches: one_to_all / all_to_one jobs checked for a wedged GPU (and fitted) on their own GPU
# only: the job on gpu0 allocates and copies on the wedged gpu2 and ends `error` at its
# deadline instead of `skipped`
@pytest.mark.parametrize("key", ["one_to_all", "all_to_one"])
def test_a_pattern_job_that_needs_a_gpu_that_stopped_answering_is_skipped(tiny_deadline, key):
    from bwprof.gpu import cost

    backend, fake = _fake_cuda_backend(devices=3)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    plan = replace(_plan(f"h2d_pinned,{key}", preset="standard"), transfer_sizes=(64 << 10,))
    case = get_case(key)
    jobs = executor.jobs(case, plan)
    assert [d.index for d in cost.involved(case, executor, jobs[1])] == [1, 0, 2]
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))

    def run():
        fake.stall(2)
        try:
            return runner.run()
        finally:
            assert not runner.close()

    rows = _h2d_rows_with_gpu1_stalled(fake, run)  # gpu1 stalls too: gpu1 and gpu2 wedged
    h2d = [(r.device, r.status) for r in rows if r.case == "h2d_pinned"]
    assert h2d == [("gpu0", "ok"), ("gpu1", "error"), ("gpu2", "error")]
    pattern = [r for r in rows if r.case == key]
    assert pattern and {r.status for r in pattern} == {"skipped"}
    assert all("stopped answering earlier in this run" in r.note for r in pattern)
    assert not [e for e in fake.log if e[0] == "hung"]


def _deadlines_seen(backend):
    """The list `backend.deadline_s` is appended to at every sample it times."""
    seen = []
    timed = backend.time_sample

    def recording(works, gate, hold_us):
        seen.append(backend.deadline_s)
        return timed(works, gate, hold_us)

    backend.time_sample = recording
    return seen


# Catches: a deadline that is not the plan's (a fixed one would cut off a slow, honest link or
# leave a stall waiting for minutes)
def test_each_jobs_gpu_waits_are_bounded_by_five_times_its_plan_and_at_least_60_s(monkeypatch):
    from bwprof.gpu import job as gpu_job

    backend = SimBackend(devices=1)
    seen = _deadlines_seen(backend)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    case, plan = get_case("h2d_pinned"), _plan("h2d_pinned")
    first = executor.jobs(case, plan)[0]
    executor.measure(case, first, plan)
    assert seen and set(seen) == {60.0}  # a small job: the floor
    monkeypatch.setattr(gpu_job, "DEADLINE_FLOOR_S", 0.0)
    seen.clear()
    executor.measure(case, first, plan)
    planned = executor.cost(case, first, plan, None).seconds
    assert planned > 0 and seen == [pytest.approx(5 * planned)] * len(seen)


# Catches: a deadline planned from the link's maximum rate: a link trained down to Gen1 x1
# (the fault bwprof exists to find) runs ~250x slower and its honest copies would be taken
# for a wedge
def test_a_jobs_deadline_is_planned_at_its_links_current_rate(monkeypatch):
    from bwprof.gpu import job as gpu_job
    from bwprof.peaks import pcie_peak_gbps

    backend = SimBackend(devices=1)
    seen = _deadlines_seen(backend)
    gen5 = pcie_peak_gbps(5, 16)
    devices = [replace(d, peak_pcie_gbps=gen5,
                       metadata={**d.metadata, "pcie_gen_current": 1, "pcie_width_current": 1})
               for d in describe(backend)]
    executor = GpuExecutor(backend, devices, host_memory_bytes=8 << 30)
    monkeypatch.setattr(gpu_job, "DEADLINE_FLOOR_S", 0.0)
    case, plan = get_case("h2d_pinned"), _plan("h2d_pinned")
    first = executor.jobs(case, plan)[0]
    executor.measure(case, first, plan)
    planned = executor.cost(case, first, plan, None).seconds
    slowdown = gen5 / pcie_peak_gbps(1, 1)
    assert slowdown > 200 and gpu_job.link_slowdown(devices) == pytest.approx(slowdown)
    assert seen and seen == [pytest.approx(5 * planned * slowdown)] * len(seen)
    assert gpu_job.link_slowdown(describe(backend)) == 1.0  # current rate unknown


# Catches: p2p_all_pairs's samples issuing n(n-1) event waits (3,080 for 56 streams), Python
# issue time inside the gate's hold that could leave every small-size sample uncovered
def test_p2p_all_pairs_on_8_gpus_waits_o_streams_times_a_sample():
    backend, fake = _fake_cuda_backend(devices=8)
    waits_per_sample = []
    timed = backend.time_sample

    def counting(works, gate, hold_us):
        before = sum(1 for entry in fake.log if entry[0] == "wait")
        sample = timed(works, gate, hold_us)
        waits_per_sample.append((len(works),
                                 sum(1 for entry in fake.log if entry[0] == "wait") - before))
        return sample

    backend.time_sample = counting
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    plan = replace(_plan("p2p_all_pairs"), transfer_sizes=(64 << 10,))
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    rows = runner.run()
    runner.close()
    assert [r.status for r in rows] == ["ok"]
    assert waits_per_sample and {streams for streams, _ in waits_per_sample} == {56}
    # The gate, the barrier (one stream on the others' warm-ups, the others on its start)
    # and the final event: 4 a stream at most, where every stream waiting on every other
    # stream's warm-up made 3,246.
    assert max(waits for _, waits in waits_per_sample) <= 4 * 56
