"""Each finding rule on hand-made rows, and the whole chain on a two-GPU box (simulated
copies, fake NVML counters) with one link trained at Gen4."""

from __future__ import annotations

from dataclasses import replace

from bwprof.analysis.findings import (
    FINDING_COLUMNS,
    above_peak,
    busy_before_run,
    clock_events,
    counters_disagree,
    derive_findings,
    findings_frame,
    pcie_below_max,
    slower_than_siblings,
)
from bwprof.schema.meta import IdleCheck, TelemetryMeta
from bwprof.schema.table import results_frame
from tests.schema import builders
from tests.schema.builders import gpu, gpus, meta
from tests.store.test_export import make_row


def _frame(*rows):
    return results_frame(list(rows))


def _gpu(**fields):
    """A GPU row; its median is its best unless given (the sibling rules read medians)."""
    base = dict(backend="cuda", case="h2d_pinned", device="gpu0", device_name="NVIDIA H200",
                direction="h2d", memory="pinned", threads=None, size_bytes=256 << 20,
                gbps_best=55.0, peak_gbps=63.0, note="")
    merged = {**base, **fields}
    merged.setdefault("gbps_median", merged["gbps_best"])
    return make_row(**merged)


SYSTEM = meta(gpus=gpus(*(gpu(i, metadata={"pcie_gen_max": 5, "pcie_width_max": 16})
                          for i in range(4))))


def test_pcie_below_max_only_under_load_and_only_below():
    rows = _frame(_gpu(counters={"telemetry_samples": 3, "pcie_gen_min": 4,
                                 "pcie_width_min": 16}),
                  _gpu(device="gpu1", counters={"telemetry_samples": 3, "pcie_gen_min": 5,
                                                "pcie_width_min": 16}),
                  _gpu(device="gpu2", counters={"telemetry_samples": 0}))
    (finding,) = pcie_below_max(rows, SYSTEM)
    assert finding.device == "gpu0" and "Gen4 x16" in finding.evidence
    assert "maximum Gen5 x16" in finding.evidence


def test_a_narrow_link_of_unknown_generation_says_so_plainly():
    rows = _frame(_gpu(counters={"telemetry_samples": 3, "pcie_gen_min": None,
                                 "pcie_width_min": 8}))
    (finding,) = pcie_below_max(rows, SYSTEM)
    assert "Gen? x8 during h2d_pinned" in finding.evidence


def test_clock_events_name_the_reasons():
    rows = _frame(_gpu(counters={"throttle_reasons": "sw_power_cap|hw_thermal"}), _gpu())
    (finding,) = clock_events(rows)
    assert finding.what == "clocks held down during measurement (hw_thermal, sw_power_cap)"


def test_busy_before_the_run():
    system = meta(telemetry=TelemetryMeta(idle_check=(
        IdleCheck(device="gpu0", busy=True, gpu_util_pct=88, other_processes=(4242,)),
        IdleCheck(device="gpu1", busy=False))))
    (finding,) = busy_before_run(system)
    assert finding.device == "gpu0" and "4242" in finding.evidence


def test_a_gpu_under_80_percent_of_its_identical_siblings():
    rows = _frame(*(_gpu(device=f"gpu{i}", gbps_best=55.0) for i in range(3)),
                  _gpu(device="gpu3", gbps_best=40.0),
                  _gpu(device="gpu4", gbps_best=10.0, device_name="another GPU"))
    (finding,) = slower_than_siblings(rows)
    assert finding.device == "gpu3" and "median of 55.0 GB/s over 3 other" in finding.evidence


def test_on_a_two_gpu_box_the_slower_gpu_is_held_against_its_sibling_alone():
    # 70% of its sibling: with itself in the median (their mean, 46.75) it would pass.
    rows = _frame(_gpu(device="gpu0", gbps_best=55.0), _gpu(device="gpu1", gbps_best=38.5))
    (finding,) = slower_than_siblings(rows)
    assert finding.device == "gpu1" and "median of 55.0 GB/s over 1 other" in finding.evidence


def test_siblings_leave_out_small_copies_and_failed_validations():
    small = [_gpu(device=f"gpu{i}", size_bytes=64 << 10, gbps_best=b)
             for i, b in enumerate((20.0, 10.0))]
    invalid = [_gpu(device="gpu0", gbps_best=55.0),
               _gpu(device="gpu1", gbps_best=5.0, status="invalid")]
    assert slower_than_siblings(_frame(*small, *invalid)) == []


def test_above_peak_unless_cache_resident():
    rows = _frame(_gpu(gbps_median=70.0, gbps_best=71.4),
                  _gpu(case="hbm_copy", gbps_best=9000.0, peak_gbps=4900.0,
                       flags=frozenset({"l2_resident"})))
    (finding,) = above_peak(rows)
    assert finding.severity == "error"
    assert "70.0 GB/s (median; best 71.4) > peak 63.0" in finding.evidence
    assert "NVML" not in finding.why  # a PCIe peak: nothing NVML reports about memory


def test_above_peak_reads_the_median_not_one_lucky_sample():
    """The figure every output shows is the median: a best sample over the peak whose median
    is under it is no finding (the summary shows the median under the peak)."""
    assert above_peak(_frame(_gpu(gbps_median=60.0, gbps_best=66.0))) == []


def test_an_hbm_figure_above_its_peak_also_doubts_the_bus_width_nvml_reports():
    """A driver reporting 5120 bit for an H200's 6144 would put every figure above peak."""
    rows = _frame(_gpu(case="hbm_triad", memory="hbm", direction="within", gbps_best=4150.0,
                       peak_gbps=4097.0))
    (finding,) = above_peak(rows)
    assert "NVML misreports the memory's bus width" in finding.why


def test_too_few_hardware_queues_for_concurrent_streams():
    """A training job's CUDA_DEVICE_MAX_CONNECTIONS=1 makes streams queue behind each other."""
    from bwprof.analysis.findings import few_hardware_queues

    rows = _frame(_gpu(case="bidir_pinned", streams=2), _gpu(streams=1))

    def found(queues, frame=rows):
        return few_hardware_queues(frame, meta(gpus=gpus(cuda_device_max_connections=queues)))

    (finding,) = found(1)
    assert finding.severity == "warning" and "CUDA_DEVICE_MAX_CONNECTIONS=1" in finding.evidence
    assert "during bidir_pinned;" in finding.evidence  # only the concurrent cases
    assert found(8) == [] and found(32) == [] and found(None) == []
    assert found(1, _frame(_gpu(streams=1))) == []  # nothing ran concurrently


def test_counters_disagreeing_by_more_than_20_percent():
    rows = _frame(_gpu(counters={"counter_ratio": 0.7, "counter_gbps": 35.0,
                                 "window_gbps": 50.0}),
                  _gpu(device="gpu1", counters={"counter_ratio": 1.1, "counter_gbps": 55.0,
                                                "window_gbps": 50.0}))
    (finding,) = counters_disagree(rows)
    assert finding.device == "gpu0" and "ratio 0.70" in finding.evidence

    def ratio(device, value, **fields):
        return _gpu(device=device, counters={"counter_ratio": value,
                                             "counter_gbps": 50 * value, "window_gbps": 50.0},
                    **fields)

    # DRAM utilisation against an HBM kernel: either side of the 20% bar, both ways, away
    # from float rounding at the edge.
    hbm = dict(case="hbm_triad", direction="within", memory="hbm", peak_gbps=4800.0)
    found = counters_disagree(_frame(ratio("gpu0", 0.75, **hbm), ratio("gpu1", 1.25, **hbm),
                                     ratio("gpu2", 0.85, **hbm), ratio("gpu3", 1.15, **hbm)))
    assert sorted(f.device for f in found) == ["gpu0", "gpu1"]


def test_link_counters_may_read_the_protocols_overhead_above_the_payload():
    # PCIe counters count TLP headers: a 128-byte max payload reads ~1.19 one way and ~1.25
    # both ways (the other direction's read requests too), no fault;
    # beyond 20% over the payload they imply (1.2 x 1.2) and under 0.8 they disagree.
    def ratio(device, value, direction="h2d"):
        return _gpu(device=device, direction=direction, counters={
            "counter_ratio": value, "counter_gbps": 50 * value, "window_gbps": 50.0})

    found = counters_disagree(_frame(ratio("gpu0", 1.25), ratio("gpu1", 1.40, "both"),
                                     ratio("gpu2", 1.50), ratio("gpu3", 0.75, "d2h")))
    assert sorted(f.device for f in found) == ["gpu2", "gpu3"]


def test_simulated_rows_never_yield_findings():
    rows = _frame(_gpu(backend="simulated", gbps_best=1e9))
    assert derive_findings(rows, SYSTEM) == []
    assert list(findings_frame([]).columns) == list(FINDING_COLUMNS)


def test_two_gpu_box_with_one_downtrained_link(monkeypatch):
    """Copies on the simulated backend, counters from a fake NVML where gpu1's link trained at
    Gen4: sampling, tagging, the join and the findings together must name gpu1."""
    from bwprof.gpu.devices import describe
    from bwprof.gpu.executor import GpuExecutor
    from bwprof.plan import make_plan
    from bwprof.runner import RunContext, Runner
    from bwprof.telemetry.counters import CounterReader
    from bwprof.telemetry.nvml import Nvml
    from bwprof.telemetry.session import TelemetrySession, idle_check
    from tests.gpu.test_devices import H200Like
    from tests.telemetry.fakes import counter_pynvml

    class SampledDuringCopies(H200Like):
        """Reads the counters inside every timed sample, as the sampler thread would on a
        GPU's longer copies: simulated copies of microseconds can end between two ticks of a
        busy machine's thread, leaving a GPU's rows without a sample (a flaky test)."""

        def time_sample(self, works, gate, hold_us):
            session.sampler.sample_once()
            return super().time_sample(works, gate, hold_us)

    backend = SampledDuringCopies(devices=2)
    devices = [replace(d, metadata={"pcie_gen_max": 5, "pcie_width_max": 16})
               for d in describe(backend)]
    fake = counter_pynvml({"00000000:1B:00.0": {}, "00000000:1C:00.0": {"curr_gen": 4}})
    reader = CounterReader(Nvml(fake), [(d.label, d.properties.pci_bus_id) for d in devices])
    idle = idle_check(reader)  # before the run, as start_telemetry does
    session = TelemetrySession(reader, interval_s=3600.0)  # the thread: one read at start
    plan = make_plan(cases="h2d_pinned", preset="quick", repeats=3, usable_cpus=1,
                     llc_bytes=None, memory_available_bytes=8 << 30)
    runner = Runner(plan, {"gpu": GpuExecutor(backend, devices, 8 << 30)},
                    RunContext("r", "h"), telemetry=session)
    session.start()
    try:
        rows = runner.run()
    finally:
        session.stop()
        runner.close()
    assert {s["case"] for s in session.samples} >= {"h2d_pinned"}
    joined = [r for r in rows if r.status == "ok" and r.counters.get("telemetry_samples")]
    assert joined, "at least one row should hold counter samples"
    # The rows are real-shaped but simulated; relabel them to exercise the finding rules.
    frame = results_frame([replace(r, backend="cuda") for r in rows])
    system = meta(gpus=gpus(*(d.as_meta() for d in devices)),
                  telemetry=TelemetryMeta(idle_check=idle))
    findings = derive_findings(frame, system)
    links = [f for f in findings if f.what == "PCIe link below its maximum under load"]
    assert [f.device for f in links] == ["gpu1"]
    assert "Gen4 x16" in links[0].evidence
    table = findings_frame(findings)
    assert list(table.columns) == list(FINDING_COLUMNS) and len(table) == len(findings)


def test_siblings_are_compared_only_on_the_same_measurement():
    # Two GPUs, each measured with 1 and 4 streams: no GPU is slower than its sibling.
    rows = _frame(*(_gpu(device=f"gpu{g}", case="pipeline_chunked", phase="pipeline",
                         streams=s, gbps_best=20.0 if s == 1 else 56.0)
                    for g in range(2) for s in (1, 4)))
    assert slower_than_siblings(rows) == []


def _node(device, gbps, case="ddr_triad", numa=None, threads=8):
    """A DDR row whose median is `gbps` (its best 2% over, so a test shows which it read)."""
    return make_row(device=device, case=case, gbps_median=gbps, gbps_best=1.02 * gbps,
                    threads=threads,
                    numa_node=int(device[-1]) if numa is None and "numa" in device else numa)


def test_a_numa_node_under_80_percent_of_its_hosts_other_nodes():
    from bwprof.analysis.findings import slower_numa_nodes

    rows = _frame(_node("cpu", 300.0), _node("numa0", 160.0), _node("numa1", 150.0),
                  _node("numa2", 100.0), _node("numa2", 60.0, case="ddr_copy"),
                  _node("numa0", 150.0, case="ddr_copy"), _node("numa1", 140.0, case="ddr_copy"))
    (finding,) = slower_numa_nodes(rows)
    assert finding.device == "numa2"
    assert finding.what == "NUMA node slower than its siblings on ddr_triad, ddr_copy"
    assert "median of 155.0 GB/s over 2 other NUMA nodes" in finding.evidence
    # The whole-host row is no sibling of the nodes, and balanced nodes raise nothing.
    assert slower_numa_nodes(_frame(_node("cpu", 30.0), _node("numa0", 150.0),
                                    _node("numa1", 140.0))) == []
    # In a fleet, nodes are compared within their own host only.
    assert slower_numa_nodes(_frame(_node("a:numa0", 150.0), _node("a:numa1", 140.0),
                                    _node("b:numa0", 50.0), _node("b:numa1", 55.0))) == []
    assert any(f.what.startswith("NUMA node") for f in derive_findings(rows, meta()))
    # A node given fewer CPUs (a cpuset) is no sibling of the others: no DIMM fault shown.
    assert slower_numa_nodes(_frame(_node("numa0", 150.0), _node("numa1", 140.0),
                                    _node("numa2", 60.0, threads=2))) == []


def test_a_ddr_figure_above_its_smbios_peak_is_a_finding():
    rows = _frame(make_row(gbps_median=320.0, gbps_best=325.0, peak_gbps=307.2),
                  make_row(device="numa0", gbps_median=150.0, gbps_best=152.0))
    (finding,) = [f for f in derive_findings(rows, meta()) if "above" in f.what]
    assert finding.device == "cpu" and "SMBIOS misreports" in finding.why


def test_an_nvlink_c2c_gpus_idle_pcie_link_is_no_finding():
    from bwprof.analysis.findings import pcie_below_max

    row = make_row(case="h2d_pinned", backend="cuda", device="gpu0", memory="pinned",
                   direction="h2d")
    frame = results_frame([row])
    frame["telemetry_samples"], frame["pcie_gen_min"], frame["pcie_width_min"] = 5, 1, 16
    metadata = {"pcie_gen_max": 5, "pcie_width_max": 16}
    system = meta(gpus=gpus(gpu(0, metadata=metadata)))
    assert len(pcie_below_max(frame, system)) == 1  # a PCIe board at Gen1: a finding
    system = meta(gpus=gpus(gpu(0, metadata={**metadata, "c2c_enabled": True})))
    assert pcie_below_max(frame, system) == []


def test_host_cases_on_fewer_cpus_than_the_machine_has():
    """mpirun binds a rank to one core by default: its DDR figure is one core's, not the
    node's, and the run says so; a container's cpuset is what was allocated, not a mistake."""
    from bwprof.analysis.findings import host_cpus_narrowed

    def host(usable, logical=64, cpuset=None):
        return meta(host=builders.host(usable_cpus=usable, logical_cpus=logical,
                                       cpuset_cpus=cpuset))

    rows = _frame(make_row(threads=1), make_row(device="numa0", threads=1))
    (finding,) = host_cpus_narrowed(rows, host(1))
    assert (finding.severity, finding.device) == ("warning", "cpu")
    assert finding.what == "host cases ran on 1 of the machine's 64 CPUs"
    assert "used up to 1 thread(s)" in finding.evidence and "--bind-to none" in finding.evidence
    assert any(f.what.startswith("host cases ran on") for f in derive_findings(rows, host(1)))
    # A binding inside a container's cpuset: still the launcher's doing.
    (inside,) = host_cpus_narrowed(rows, host(1, cpuset=16))
    assert inside.severity == "warning" and "of the cpuset's 16" in inside.evidence
    # Every CPU of the cpuset used: the allocation, said as information.
    (allocated,) = host_cpus_narrowed(rows, host(16, cpuset=16))
    assert allocated.severity == "info"
    assert allocated.what == "host cases ran on the 16 CPUs of this cgroup's cpuset, of the " \
                             "machine's 64"
    # Every CPU usable, no host rows measured, or no record of the CPUs: nothing to say.
    assert host_cpus_narrowed(rows, host(64)) == []
    assert host_cpus_narrowed(rows, host(64, cpuset=64)) == []
    skipped = _frame(make_row(status="skipped", gbps_best=None))
    assert host_cpus_narrowed(skipped, host(1)) == []
    assert host_cpus_narrowed(rows, meta()) == []


def test_pcie_below_max_holds_the_link_to_what_the_slot_allows():
    rows = _frame(_gpu(counters={"telemetry_samples": 3, "pcie_gen_min": 4,
                                 "pcie_width_min": 16}))
    slot_gen4 = meta(gpus=gpus(gpu(0, metadata={
        "pcie_gen_max": 5, "pcie_gen_max_system": 4, "pcie_width_max": 16})))
    assert pcie_below_max(rows, slot_gen4) == []  # the GPU does Gen5, the slot Gen4: no fault


def test_pcie_below_max_flags_a_narrow_link():
    rows = _frame(_gpu(counters={"telemetry_samples": 3, "pcie_gen_min": 5,
                                 "pcie_width_min": 8}))
    (finding,) = pcie_below_max(rows, SYSTEM)
    assert "Gen5 x8" in finding.evidence


def test_a_p2p_figure_above_its_link_peak_does_not_blame_nvmls_memory_report():
    from bwprof.analysis.findings import above_peak
    rows = _frame(_gpu(case="p2p_copy", memory="hbm", direction="p2p", gbps_best=500.0,
                       peak_gbps=450.0))
    (f,) = above_peak(rows)
    assert "NVML" not in f.why


def test_rows_without_a_stream_count_are_not_concurrent():
    from bwprof.analysis.findings import few_hardware_queues
    rows = _frame(_gpu(streams=None))
    assert few_hardware_queues(rows, meta(gpus=gpus(cuda_device_max_connections=1))) == []


def test_the_run_warns_of_few_hardware_queues():
    from bwprof.analysis.findings import derive_findings
    rows = _frame(_gpu(case="bidir_pinned", streams=2))
    found = derive_findings(rows, meta(gpus=gpus(cuda_device_max_connections=1)))
    assert any("hardware queue" in f.what for f in found)


# -- pairs, directions and the GPUs of a NUMA node ------------------------------------------------


def _pair(src, dst, gbps, case="p2p_copy", **fields):
    base = dict(case=case, device=f"gpu{src}->gpu{dst}", device_name="NVIDIA H200 -> NVIDIA H200",
                direction="p2p", memory="hbm", gbps_best=gbps * 1.01, gbps_median=gbps,
                peak_gbps=450.0)
    return _gpu(**{**base, **fields})


def _numa_system(nodes):
    return meta(gpus=gpus(*(gpu(i, numa_node=n) for i, n in enumerate(nodes))))


def test_a_slow_gpu_pair_is_named_among_the_other_pairs_on_medians():
    from bwprof.analysis.findings import slower_pairs

    system = _numa_system([0, 0, 0, 0])
    pairs = [_pair(i, j, 300.0 if (i, j) == (2, 1) else 390.0)
             for i in range(4) for j in range(4) if i != j]
    (finding,) = slower_pairs(_frame(*pairs), system)
    assert finding.device == "gpu2->gpu1"
    assert finding.what == "GPU pair slower than the other pairs on p2p_copy"
    assert "300.0 GB/s vs a median of 390.0 GB/s over 11 other pair(s)" in finding.evidence
    # Medians, not the best sample: a slow pair whose best sample was lucky is still named,
    # and one slow sample of a healthy pair (its median as the others') is not.
    lucky = [replace(r, gbps_best=400.0, value_best=400.0) if r.device == "gpu2->gpu1" else r
             for r in pairs]
    assert [f.device for f in slower_pairs(_frame(*lucky), system)] == ["gpu2->gpu1"]
    unlucky = [_pair(i, j, 390.0, gbps_best=100.0 if (i, j) == (2, 1) else 394.0)
               for i in range(4) for j in range(4) if i != j]
    assert slower_pairs(_frame(*unlucky), system) == []
    # The whole chain says it too, and a one-GPU-pair sweep (other sizes) raises nothing.
    sweep = [_pair(0, 1, 390.0 / k, size_bytes=(256 << 20) // k) for k in (2, 4)]
    found = derive_findings(_frame(*pairs, *sweep), system)
    assert [(f.device, f.what) for f in found] == [(finding.device, finding.what)]


def test_pairs_are_held_only_against_pairs_of_the_same_links_and_route():
    from bwprof.analysis.findings import slower_pairs

    # gpu0-gpu1 and gpu2-gpu3 share a socket; pairs crossing to the other socket are slower
    # by design, and a pair of fewer NVLinks has a lower peak: neither is a finding.
    system = _numa_system([0, 0, 1, 1])
    pairs = [_pair(i, j, 390.0 if (i < 2) == (j < 2) else 250.0)
             for i in range(4) for j in range(4) if i != j]
    fewer_links = _pair(0, 1, 190.0, case="p2p_copy", peak_gbps=225.0,
                        device="gpu0->gpu1", size_bytes=512 << 20)
    assert slower_pairs(_frame(*pairs), system) == []
    assert slower_pairs(_frame(fewer_links, _pair(1, 0, 390.0, size_bytes=512 << 20),
                               _pair(0, 2, 390.0, size_bytes=512 << 20)), system) == []


def test_a_slow_pair_latency_is_the_higher_one_and_both_ways_pairs_compare_too():
    from bwprof.analysis.findings import slower_pairs

    system = _numa_system([0, 0, 0])
    latency = [_pair(i, j, 0.0, case="lat_p2p", metric="latency", unit="ns",
                     higher_is_better=False, gbps_best=None, gbps_median=None, peak_gbps=None,
                     value_best=ns, value_median=ns)
               for i in range(3) for j in range(3) if i != j
               for ns in [1400.0 if (i, j) == (0, 2) else 900.0]]
    (finding,) = slower_pairs(_frame(*latency), system)
    assert finding.device == "gpu0->gpu2" and "1400.0 ns vs a median of 900.0 ns" in (
        finding.evidence)
    both = [_pair(i, j, 500.0 if (i, j) == (1, 2) else 770.0, case="p2p_bidir",
                  device=f"gpu{i}<->gpu{j}", direction="both", streams=2, peak_gbps=900.0)
            for i in range(3) for j in range(3) if i < j]
    (finding,) = slower_pairs(_frame(*both), system)
    assert finding.device == "gpu1<->gpu2" and "p2p_bidir" in finding.what


def test_a_slow_d2h_direction_of_a_bidirectional_copy_is_named():
    from bwprof.analysis.findings import slow_directions

    def bidir(direction, gbps, device="gpu0"):
        return _gpu(case="bidir_pinned", device=device, direction=direction, streams=2,
                    gbps_best=gbps + 0.5, gbps_median=gbps)

    rows = [bidir("h2d", 52.0), bidir("d2h", 30.0), bidir("both", 82.0),
            bidir("h2d", 52.0, "gpu1"), bidir("d2h", 51.0, "gpu1"), bidir("both", 103.0, "gpu1")]
    (finding,) = slow_directions(_frame(*rows))
    assert finding.device == "gpu0"
    assert finding.what == "d2h slower than the opposite direction on bidir_pinned"
    assert "30.0 GB/s vs 52.0 GB/s h2d (medians)" in finding.evidence
    found = derive_findings(_frame(*rows), SYSTEM)
    assert ("gpu0", finding.what) in {(f.device, f.what) for f in found}
    # The H200's own both-ways copy (h2d 51.9, d2h 50.8 GB/s) is no finding, nor is a size
    # bound by launch latency.
    healthy = [bidir("h2d", 51.9), bidir("d2h", 50.8),
               _gpu(case="bidir_pinned", direction="d2h", streams=2, size_bytes=64 << 10,
                    gbps_best=5.0), _gpu(case="bidir_pinned", streams=2,
                                         size_bytes=64 << 10, gbps_best=15.0)]
    assert slow_directions(_frame(*healthy)) == []


def test_one_slow_direction_of_a_gpu_pair_is_named():
    from bwprof.analysis.findings import slow_directions

    rows = [_pair(0, 1, 380.0, case="p2p_bidir", streams=2),
            _pair(1, 0, 250.0, case="p2p_bidir", streams=2),
            _pair(0, 1, 630.0, case="p2p_bidir", streams=2, device="gpu0<->gpu1",
                  direction="both")]
    (finding,) = slow_directions(_frame(*rows))
    assert finding.device == "gpu1->gpu0"
    assert finding.what == "gpu1->gpu0 slower than the opposite direction on p2p_bidir"
    assert "250.0 GB/s vs 380.0 GB/s gpu0->gpu1 (medians)" in finding.evidence


def test_the_gpus_of_a_slow_numa_node_are_named_by_their_node():
    from bwprof.analysis.findings import slower_gpu_numa_nodes

    def h2d(index, node, gbps, case="h2d_all"):
        return _gpu(case=case, device=f"gpu{index}", numa_node=node, gbps_median=gbps,
                    gbps_best=gbps, streams=4 if case == "h2d_all" else 1)

    rows = [h2d(0, 0, 55.0), h2d(1, 0, 54.0), h2d(2, 1, 38.0), h2d(3, 1, 39.0),
            h2d(0, 0, 55.0, "h2d_pinned"), h2d(1, 0, 55.0, "h2d_pinned"),
            h2d(2, 1, 40.0, "h2d_pinned"), h2d(3, 1, 41.0, "h2d_pinned")]
    (finding,) = slower_gpu_numa_nodes(_frame(*rows))
    assert finding.device == "numa1"
    assert finding.what == ("host copies of the GPUs on NUMA node 1 slower than on the other "
                            "nodes on h2d_all, h2d_pinned")
    assert "38.5 GB/s on gpu2, gpu3 vs a median of 54.5 GB/s over 2 GPU(s)" in finding.evidence
    balanced = [h2d(0, 0, 55.0), h2d(1, 1, 54.0)]
    assert slower_gpu_numa_nodes(_frame(*balanced)) == []


def test_a_slow_pair_of_a_two_gpu_box_is_named_once():
    """Two GPUs: the other pair is the opposite direction; one finding, not two."""
    rows = _frame(_pair(0, 1, 390.0), _pair(1, 0, 250.0))
    found = derive_findings(rows, _numa_system([0, 0]))
    assert [(f.device, f.what) for f in found] == [
        ("gpu1->gpu0", "GPU pair slower than the other pairs on p2p_copy")]


# -- a degraded GPU, and clocks held at lowered application clocks -------------------------------


def _clocked(index, graphics=1095, mem=1215, default=(1095, 1215)):
    """An A100-like GPU: its default application clocks (1095, 1215 MHz) below its maximum
    SM clock (1410): a healthy board at its defaults."""
    return gpu(index, metadata={"sm_clock_max_mhz": 1410, "memory_clock_max_mhz": 1215,
                                "applications_clock_graphics_mhz": graphics,
                                "applications_clock_mem_mhz": mem,
                                "default_applications_clock_graphics_mhz": default[0],
                                "default_applications_clock_mem_mhz": default[1]})


# Catches: application clocks compared with the maximum, where many healthy parts ship a
# default below it (A100 1095 of 1410 MHz): a false warning on every run of a healthy box
def test_application_clocks_set_below_the_boards_default_are_a_finding():
    from bwprof.analysis.findings import applications_clocks_lowered

    system = meta(gpus=gpus(_clocked(0), _clocked(1, graphics=900), _clocked(2, mem=1000),
                            _clocked(3, default=(None, None)),  # default unknown: nothing
                            _clocked(4, graphics=1410),  # above the default (-ac to max)
                            gpu(5, metadata={})))  # gpu5: NVML did not say
    found = applications_clocks_lowered(system)
    assert [(f.device, f.evidence) for f in found] == [
        ("gpu1", "graphics 900 MHz, default 1095 MHz"),
        ("gpu2", "memory 1000 MHz, default 1215 MHz")]
    assert found[0].what == ("application clocks set below the board's default "
                             "(nvidia-smi -ac); nvidia-smi -rac restores them")
    assert {f.what for f in derive_findings(_frame(_gpu()), system)} >= {found[0].what}


def test_clocks_held_at_application_clocks_are_not_hidden_as_benign():
    rows = _frame(*(_gpu(device=f"gpu{i}", counters={"throttle_reasons": "applications_clocks"})
                    for i in range(4)))
    system = meta(gpus=gpus(_clocked(0, graphics=900), _clocked(1), gpu(2, metadata={}),
                            _clocked(3, default=(None, None))))
    found = {f.device: f for f in clock_events(rows, system)}
    # Lowered (gpu0) or unknown (gpu2, gpu3): said; at the board's default (gpu1, below
    # the maximum) they hold nothing down.
    assert sorted(found) == ["gpu0", "gpu2", "gpu3"]
    assert found["gpu0"].what == "clocks held down during measurement (applications_clocks)"
    assert "nvidia-smi -ac" in found["gpu0"].why


def test_the_join_keeps_the_application_clocks_reason_on_the_row():
    from bwprof.telemetry.join import join_row

    samples = [{"t_s": t, "device": "gpu0", "throttle_reasons": 0x1 | 0x2} for t in (0.1, 0.2)]
    counters = join_row(samples, device="gpu0", direction="within", memory="hbm",
                        peak_gbps=None, window=(0.0, 0.3), window_bytes=None,
                        host_over_pcie=True)
    assert counters["throttle_reasons"] == "applications_clocks"


def _health(device, before, after, xids=(), flagged=0):
    from bwprof.schema.meta import GpuHealth, MemoryHealth

    return GpuHealth(device=device, before=MemoryHealth(**before), after=MemoryHealth(**after),
                     xid_events=tuple(xids), flagged_rows=flagged)


def test_a_gpu_that_got_worse_during_the_run_is_named_with_its_count():
    from bwprof.analysis.findings import gpu_health

    clean = {"ecc_uncorrected_volatile": 0, "ecc_corrected_volatile": 2,
             "remap_pending": False, "remap_failure": False}
    system = meta(telemetry=TelemetryMeta(enabled=True, health=(
        _health("gpu0", clean, clean),
        _health("gpu1", clean, {**clean, "ecc_uncorrected_volatile": 3}, flagged=4),
        _health("gpu2", clean, {**clean, "ecc_corrected_volatile": 3, "remap_pending": True}),
        _health("gpu3", clean, clean, xids=[79]),
    )))
    found = {f.device: f for f in gpu_health(system)}
    assert sorted(found) == ["gpu1", "gpu2", "gpu3"]
    assert found["gpu1"].what == "gpu1: 3 new uncorrected ECC errors during the run"
    assert found["gpu1"].severity == "error"
    assert "ecc_uncorrected_volatile 0 -> 3 (+3)" in found["gpu1"].evidence
    assert "4 row(s) measured meanwhile flagged gpu_degraded" in found["gpu1"].evidence
    assert found["gpu2"].what == ("gpu2: 1 new corrected ECC error, a row remap pending "
                                  "(applied at the next GPU reset) during the run")
    assert found["gpu2"].severity == "warning"  # the remap; corrected errors alone: info
    assert found["gpu3"].what == "gpu3: 1 critical Xid event(s) (Xid 79) during the run"
    assert {f.what for f in derive_findings(_frame(_gpu()), system)} >= {
        f.what for f in found.values()}


# Catches: a remap or retirement pending before the run worded "during the run"; one
# corrected ECC error a warning; an application's Xid (a process's own fault) an error
def test_a_gpus_health_is_worded_by_when_and_weighed_by_what():
    from bwprof.analysis.findings import gpu_health

    clean = {"ecc_uncorrected_volatile": 0, "ecc_corrected_volatile": 2,
             "remap_pending": False, "remap_failure": False, "retired_pages_pending": False}
    old = {**clean, "remap_pending": True}
    system = meta(telemetry=TelemetryMeta(enabled=True, health=(
        _health("gpu0", old, old),
        _health("gpu1", clean, {**clean, "ecc_corrected_volatile": 3}),
        _health("gpu2", clean, clean, xids=[13, 43]),
        _health("gpu3", clean, clean, xids=[999]),
        _health("gpu4", old, {**old, "ecc_uncorrected_volatile": 1, "remap_failure": True},
                xids=[48, 31], flagged=2),
        _health("gpu5", {**clean, "remap_pending": None}, old),
    )))
    found = {f.device: f for f in gpu_health(system)}
    assert found["gpu0"].what == ("gpu0: a row remap pending (applied at the next GPU reset) "
                                  "since before the run")
    assert found["gpu0"].severity == "warning"
    assert found["gpu1"].what == "gpu1: 1 new corrected ECC error during the run"
    assert found["gpu1"].severity == "info" and "no row flagged" in found["gpu1"].why
    assert found["gpu2"].what == ("gpu2: 2 application Xid event(s): a process on the GPU "
                                  "faulted (Xid 13, Xid 43) during the run")
    assert found["gpu2"].severity == "info"
    assert found["gpu3"].what == ("gpu3: 1 Xid event(s) NVIDIA's catalogue does not place "
                                  "(Xid 999) during the run")
    assert found["gpu3"].severity == "warning"
    assert found["gpu4"].what == (
        "gpu4: 1 new uncorrected ECC error, 1 critical Xid event(s) (Xid 48), 1 application "
        "Xid event(s): a process on the GPU faulted (Xid 31), row remapping failed (the GPU "
        "needs service) during the run; a row remap pending (applied at the next GPU reset) "
        "since before the run")
    assert found["gpu4"].severity == "error"
    assert found["gpu5"].what.endswith("at the end of the run")


def _run_on_fake_nvml(gpus, cases, measure):
    """The rows of `cases` run on `gpus` simulated H200s with NVML from a fake whose ECC
    counts start at zero; `measure(measured, gpu_config, case, job, plan)` stands in for the
    executor's measure (`measured` is the real one, `gpu_config` the fake's per-bus dict).
    Returns the rows, the telemetry session (stopped) and the devices."""
    from bwprof.gpu.devices import describe
    from bwprof.gpu.executor import GpuExecutor
    from bwprof.plan import make_plan
    from bwprof.runner import RunContext, Runner
    from bwprof.telemetry.counters import CounterReader
    from bwprof.telemetry.nvml import Nvml
    from bwprof.telemetry.session import TelemetrySession
    from tests.gpu.test_devices import H200Like
    from tests.telemetry.fakes import counter_pynvml

    backend = H200Like(devices=gpus)
    devices = describe(backend)
    ecc = {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 0,
           "uncorrected_aggregate": 0}
    fake = counter_pynvml({f"00000000:{0x1B + i:02X}:00.0":  # NVML's bus ids of H200Like
                           {"ecc": dict(ecc), "remapped": [0, 0, 0, 0]} for i in range(gpus)})
    reader = CounterReader(Nvml(fake), [(d.label, d.properties.pci_bus_id) for d in devices])
    session = TelemetrySession(reader, interval_s=0.001)
    plan = make_plan(cases=cases, preset="quick", repeats=3, usable_cpus=1,
                     llc_bytes=None, memory_available_bytes=8 << 30)
    executor = GpuExecutor(backend, devices, 8 << 30)
    measured = executor.measure
    executor.measure = lambda case, job, plan: measure(measured, fake.gpu_config, case, job,
                                                       plan)
    runner = Runner(plan, {"gpu": executor}, RunContext("r", "h"), telemetry=session)
    session.start()
    try:
        rows = runner.run()
    finally:
        session.stop()
        runner.close()
    return rows, session, devices


def test_ecc_errors_rising_during_a_run_flag_its_rows_and_name_the_count():
    """Copies on the simulated backend, NVML from a fake whose uncorrected ECC count on gpu1
    rises by 3 during one job: that job's rows (and only they) are flagged `gpu_degraded`,
    system.json records the counts, and the finding names the GPU and the count."""
    from bwprof.schema.flags import GPU_DEGRADED

    sick = []

    def measure_and_fail(measured, gpu_config, case, job, plan):
        rows = measured(case, job, plan)
        if job.device == 1 and not sick:  # gpu1's first job raises 3 uncorrected errors
            gpu1 = gpu_config["00000000:1C:00.0"]
            gpu1["ecc"]["uncorrected_volatile"] += 3
            gpu1["ecc"]["uncorrected_aggregate"] += 3
            sick.append(job.label())
        return rows

    rows, session, devices = _run_on_fake_nvml(2, "h2d_pinned,d2h_pinned", measure_and_fail)
    health = session.health_report()
    flagged = [r for r in rows if GPU_DEGRADED in r.flags]
    assert sick and flagged, "the job that raised the errors should have flagged rows"
    assert {r.device for r in flagged} == {"gpu1"}
    assert len(flagged) < len([r for r in rows if r.device == "gpu1"])  # that job's only
    assert health is not None
    assert [h.changes() for h in health] == [{}, {"ecc_uncorrected_volatile": 3}]
    assert health[1].flagged_rows == len(flagged)
    frame = results_frame([replace(r, backend="cuda") for r in rows])
    assert frame.loc[frame["flags"].str.contains(GPU_DEGRADED), "device"].eq("gpu1").all()
    system = meta(gpus=gpus(*(d.as_meta() for d in devices)),
                  telemetry=TelemetryMeta(enabled=True, health=health))
    (finding,) = [f for f in derive_findings(frame, system) if "ECC" in f.what]
    assert finding.device == "gpu1" and finding.severity == "error"
    assert finding.what == "gpu1: 3 new uncorrected ECC errors during the run"
    assert f"{len(flagged)} row(s) measured meanwhile flagged gpu_degraded" in finding.evidence


def test_a_job_that_fails_as_its_gpu_reports_errors_is_flagged_too():
    """A GPU that falls off the bus (Xid 79, uncorrected ECC) ends its job in an error row:
    that row carries `gpu_degraded` as a measured one would, so the error reads as the GPU's."""
    from bwprof.schema.flags import GPU_DEGRADED

    def fall_off_the_bus(measured, gpu_config, case, job, plan):
        gpu_config["00000000:1B:00.0"]["ecc"]["uncorrected_volatile"] += 1
        raise RuntimeError("cudaErrorLaunchFailure: unspecified launch failure")

    rows, _, _ = _run_on_fake_nvml(1, "h2d_pinned", fall_off_the_bus)
    assert rows and all(r.status == "error" for r in rows)
    assert all(GPU_DEGRADED in r.flags for r in rows), [(r.status, r.flags) for r in rows]
