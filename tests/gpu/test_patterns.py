"""The traffic-pattern cases (h2d_all_bidir, one_to_all, all_to_one, p2p_all_pairs) and the
one-clock aggregate on the simulated backend with eight GPUs and an injected start skew.
Simulated times are CPU stand-ins: only the bookkeeping and the clock's rule are checked."""

import numpy as np
import pytest

from bwprof.gpu.devices import describe
from bwprof.gpu.executor import GpuExecutor
from bwprof.gpu.sim import SimBackend, SimDeviceArray
from bwprof.plan import make_plan
from bwprof.runner import RunContext, Runner
from bwprof.schema.table import results_frame
from bwprof.units import MiB

PATTERNS = "h2d_all,h2d_all_bidir,one_to_all,all_to_one,p2p_all_pairs"
SKEW_S = 0.05


def _run(backend, cases, size="1MiB"):
    plan = make_plan(cases=cases, preset="quick", repeats=2, usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=8 << 30, size=size)
    executor = GpuExecutor(backend, describe(backend), host_memory_bytes=8 << 30)
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"))
    try:
        return results_frame(runner.run())
    finally:
        runner.close()


@pytest.fixture(scope="module")
def eight():
    return _run(SimBackend(devices=8, memory_bytes=64 << 20), PATTERNS, size="64KiB")


@pytest.fixture(scope="module")
def eight_skewed():
    return _run(SimBackend(devices=8, memory_bytes=64 << 20, start_skew_s=SKEW_S), PATTERNS,
                size="64KiB")


def _ok(frame, case):
    return frame[(frame["case"] == case) & (frame["status"] == "ok")]


def test_eight_gpus_give_every_patterns_rows(eight):
    assert set(eight["case"]) == set(PATTERNS.split(","))
    skipped = eight[eight["status"] != "ok"]
    assert set(skipped["status"]) <= {"skipped"}
    assert skipped["note"].str.contains("does not fit").all()  # 64 MiB simulated GPUs
    # One job per GPU: the sweep on gpu0, the P2P matrix size (here too big: skipped) on
    # the other seven.
    for case in ("one_to_all", "all_to_one"):
        assert len(eight[(eight["case"] == case) & (eight["size_bytes"] == 256 * MiB)]) == 8
    size = 64 << 10
    eight = eight[eight["size_bytes"] == size]
    # Per source (reading) GPU, both variants: the copy engine's row and the SM kernels'.
    assert list(_ok(eight, "one_to_all")["device"]) == ["gpu0->all"] * 2
    assert list(_ok(eight, "all_to_one")["device"]) == ["all->gpu0"] * 2
    for case in ("one_to_all", "all_to_one"):
        rows = _ok(eight, case)
        assert list(rows["phase"]) == ["copy_engine", "sm"], case
        assert (rows["bytes_per_op"] == 7 * rows["size_bytes"]).all()
        assert (rows["streams"] == 7).all()
        assert "copy engine;" in rows.iloc[0]["note"]
        assert "SM kernels on gpu0" in rows.iloc[1]["note"]
    pairs = _ok(eight, "p2p_all_pairs")
    assert list(pairs["device"]) == ["all"]
    assert pairs.iloc[0]["bytes_per_op"] == 56 * size and pairs.iloc[0]["streams"] == 56
    bidir = _ok(eight, "h2d_all_bidir")
    assert list(bidir["device"]) == ["all"] and bidir.iloc[0]["bytes_per_op"] == 16 * size
    assert bidir.iloc[0]["streams"] == 16
    assert list(_ok(eight, "h2d_all")["device"]) == [f"gpu{i}" for i in range(8)] + ["all"]


def test_a_skewed_start_cannot_inflate_an_aggregate(eight_skewed):
    """Each stream of a sample starts SKEW_S after the one before: on one clock the sample
    lasts at least (streams - 1) x SKEW_S, so the aggregate can never exceed its bytes over
    that, however fast each stream's own time says it was (the old rule, bytes over the
    longest stream's own time, would have ignored the skew entirely)."""
    for case in ("h2d_all", "h2d_all_bidir", "one_to_all", "all_to_one", "p2p_all_pairs"):
        rows = _ok(eight_skewed, case)
        aggregate = rows[rows["device"].str.contains("all")]
        assert len(aggregate), case
        for _, row in aggregate.iterrows():
            per_op_floor = (row["streams"] - 1) * SKEW_S / row["ops_per_sample"]
            assert row["value_best"] * 1e9 <= row["bytes_per_op"] / per_op_floor * 1.0001, case
    each = _ok(eight_skewed, "h2d_all")
    each = each[each["size_bytes"] == 64 << 10]
    per_gpu, everything = each[each["device"] != "all"], each[each["device"] == "all"].iloc[0]
    # Each GPU's own time ignores the skew: the old rule (8 x size over the longest of them,
    # 8 x the slowest GPU's figure) would stand far above the one clock's aggregate.
    old_rule = 8 * per_gpu["value_best"].min()
    assert everything["value_best"] < old_rule / 10


def test_on_one_gpu_the_aggregate_is_the_gpus_own_row():
    """One clock with one stream is that stream's own start and end: h2d_all's `all` row
    equals gpu0's (within 1%), and GPU-to-GPU patterns are waived with the reason."""
    frame = _run(SimBackend(devices=1), "h2d_all,one_to_all,all_to_one,p2p_all_pairs")
    rows = _ok(frame, "h2d_all")
    rows = rows[rows["size_bytes"] == MiB]
    gpu0, everything = (rows[rows["device"] == d].iloc[0] for d in ("gpu0", "all"))
    assert everything["value_median"] == pytest.approx(gpu0["value_median"], rel=0.01)
    assert everything["bytes_per_op"] == gpu0["bytes_per_op"] == MiB
    waived = frame[frame["case"] != "h2d_all"]
    assert set(waived["status"]) == {"waived"} and len(waived) == 3
    assert waived["note"].str.contains("needs 2 GPUs").all()


FAST_S, SLOW_S = 1e-3, 1.5e-3
"""One operation's simulated time alone on a stream: gpu1's streams and copies into host
memory are the slow ones."""


def _op_seconds(work):
    args = work.enqueue.args
    to_host = isinstance(args[0], np.ndarray) and not isinstance(args[0], SimDeviceArray)
    return SLOW_S if work.stream.device_id == 1 or to_host else FAST_S


def test_a_measured_stream_never_runs_its_tail_alone():
    """Two streams at once share their link (each at half speed while both run), one 1.5x
    slower alone than the other. With equal work the fast one ends at 2 units, and the slow
    one runs its last third alone: it would read 2.5 units per op, faster than it is under
    contention (3). Each direction's (GPU's) row comes from a pass where the other stream
    does twice the work, so both read their fully contended time; the aggregate keeps the
    equal-work pass on one clock (2 x size over 2.5 units)."""
    backend = SimBackend(devices=2, contention=1.0, op_seconds=_op_seconds)
    frame = _run(backend, "bidir_pinned,h2d_all,p2p_bidir,p2p_bidir_sm", size="64KiB")
    size = 64 << 10
    frame = frame[frame["size_bytes"] == size]
    fast, slow = size / (2 * FAST_S) / 1e9, size / (2 * SLOW_S) / 1e9
    equal = 2 * size / (FAST_S + SLOW_S) / 1e9  # the slow stream's tail alone
    for case, fast_row, slow_row, sum_row in (
            ("bidir_pinned", "h2d", "d2h", "both"),
            ("h2d_all", "gpu0", "gpu1", "all"),
            ("p2p_bidir", "gpu0->gpu1", "gpu1->gpu0", "gpu0<->gpu1"),
            ("p2p_bidir_sm", "gpu0->gpu1", "gpu1->gpu0", "gpu0<->gpu1")):
        rows = _ok(frame, case)
        if case == "bidir_pinned":  # gpu0's: h2d into the device fast, d2h into host slow
            rows = rows[rows["device"] == "gpu0"]
        key = "direction" if case == "bidir_pinned" else "device"
        row = {r[key]: r for _, r in rows.iterrows()}
        assert row[fast_row]["value_median"] == pytest.approx(fast, rel=1e-6), case
        assert row[slow_row]["value_median"] == pytest.approx(slow, rel=1e-6), case
        assert row[sum_row]["value_median"] == pytest.approx(equal, rel=1e-6), case
        for name in (fast_row, slow_row):
            assert "interfering copies doubled" in row[name]["note"], case
        assert "interfering copies doubled" not in row[sum_row]["note"], case


def test_each_one_to_all_variant_is_validated_on_its_own(monkeypatch):
    """The targets are zeroed between the copy engine's pass and the SM kernels', so an SM
    kernel that copies nothing fails its own row's check while the copy engine's holds."""
    from bwprof.gpu import sim
    monkeypatch.setattr(sim, "_sm_copy", lambda src, dst: None)
    frame = _run(SimBackend(devices=4), "one_to_all,all_to_one", size="64KiB")
    for case in ("one_to_all", "all_to_one"):
        rows = frame[(frame["case"] == case) & (frame["size_bytes"] == 64 << 10)]
        engine, sm = (rows[rows["phase"] == p].iloc[0] for p in ("copy_engine", "sm"))
        assert engine["status"] == "ok" and "validation failed" not in engine["note"], case
        assert "validation failed" in sm["note"], case
        assert sm["status"] != "ok" or "invalid" in sm["flags"], case


H200_BOX = "hgx-8xh200"


def _concurrent_sm_blocks(record):
    """Per GPU, the SM copy blocks one sample keeps in flight at once: each stream's grid
    (its kernels run one after another on it), summed over the streams (they run at once)."""
    per_stream = {}
    for launch in record.launches:
        if launch.kernel == "sm_copy":
            key = (launch.device, launch.stream)
            per_stream[key] = max(per_stream.get(key, 0), launch.blocks)
    per_device = {}
    for (device, _), blocks in per_stream.items():
        per_device.setdefault(device, []).append(blocks)
    return per_device


# Catches: one_to_all / all_to_one's SM kernels each launched over a full grid (every
# resident block of the GPU), so the first grid holds every slot and the peers run one
# after another
def test_sm_patterns_grids_fit_on_the_gpu_together():
    """On an HGX box's eight H200 (132 SMs each), a 16 MiB copy fills a full grid (8 x 132
    blocks, every one the GPU holds), so seven of them would hold the GPU seven times over:
    each kernel gets its share, and every sample's grids on a GPU fit there together."""
    from bwprof.gpu.kernel_params import sm_copy_resident
    from tests.shapes import shape

    gpus = shape(H200_BOX).gpus
    backend = SimBackend(gpus=gpus, memory_bytes=256 << 20, record=True)
    frame = _run(backend, "one_to_all,all_to_one")
    for case in ("one_to_all", "all_to_one"):
        rows = _ok(frame, case)
        assert list(rows[rows["size_bytes"] == 16 * MiB]["phase"]) == ["copy_engine", "sm"]
    resident = sm_copy_resident(gpus[0].properties.multiprocessors)
    seven = 0
    for record in backend.recorded:
        for device, grids in _concurrent_sm_blocks(record).items():
            assert sum(grids) <= resident, (device, grids)
            seven += len(grids) == 7
    assert seven  # the samples with all seven peers' kernels at once were seen


def _fast_op(work):
    """Every simulated operation 0.1 us alone: the sample length alone would ask for
    thousands of operations a stream (MAX_OPS of them, before the ceiling)."""
    return 1e-7


# Catches: p2p_all_pairs on eight GPUs enqueuing 56 streams x (4 + 256) copies in one sample,
# 40-110 ms of host issue time against the gate's 128 ms: samples lost as uncovered
def test_all_pairs_enqueue_per_sample_stays_inside_the_gate():
    from bwprof.gpu.sampling import MAX_SAMPLE_CALLS, STREAM_CALLS

    backend = SimBackend(devices=8, memory_bytes=64 << 20, op_seconds=_fast_op, record=True)
    frame = _run(backend, "p2p_all_pairs")
    rows = _ok(frame, "p2p_all_pairs")
    assert len(rows) and (rows["streams"] == 56).all()
    assert (rows["ops_per_sample"] < 256).all()  # the ceiling cut them, and says so:
    assert rows["note"].str.contains("operations per stream per sample at most").all()
    wide = [r for r in backend.recorded if len(r.ops) == 56]
    assert wide
    for record in wide:
        assert sum(record.ops) + STREAM_CALLS * len(record.ops) <= MAX_SAMPLE_CALLS
