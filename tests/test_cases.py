import pytest

from bwprof.cases import CASES, CASES_BY_KEY, get_case, select_cases
from bwprof.errors import BwprofError

DDR_KEYS = ["ddr_copy", "ddr_scale", "ddr_add", "ddr_triad", "ddr_dot"]
HOST_LATENCY_KEYS = ["lat_host", "lat_host_numa", "lat_host_loaded"]
HOST_COMPUTE_KEYS = ["gemm_host"]
GPU_KEYS = [
    "h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable", "bidir_pinned", "d2d_copy",
    "hbm_copy", "hbm_scale", "hbm_add", "hbm_triad", "hbm_dot", "h2d_all", "d2h_all",
    "h2d_all_bidir", "one_to_all", "all_to_one", "p2p_all_pairs", "p2p_copy",
    "p2p_bidir", "h2d_sm", "d2h_sm", "d2d_sm", "p2p_read", "p2p_read_sm",
    "p2p_write_sm", "p2p_bidir_sm", "overlap_h2d_compute", "overlap_d2h_compute",
    "overlap_bidir_compute", "overlap_pageable", "pipeline_chunked",
    "lat_gpu", "lat_gpu_loaded", "lat_h2d", "lat_p2p", "lat_memcpy",
    "gemm_gpu", "fma_gpu",
]
FLEET_KEYS = ["net_p2p"]
PEER_SM_KEYS = ["p2p_read", "p2p_read_sm", "p2p_write_sm", "p2p_bidir_sm"]


def test_registry_holds_exactly_the_documented_keys():
    assert [c.key for c in CASES] == (DDR_KEYS + HOST_LATENCY_KEYS + HOST_COMPUTE_KEYS
                                      + GPU_KEYS + FLEET_KEYS)
    assert len(CASES_BY_KEY) == len(CASES)


def test_compute_cases_are_throughput_figures():
    for key in ("gemm_host", "gemm_gpu", "fma_gpu"):
        case = get_case(key)
        assert case.metric == "throughput", key
    assert get_case("gemm_host").target == "host"
    assert get_case("gemm_gpu").target == "gpu" and get_case("fma_gpu").target == "gpu"


def test_latency_cases_are_latency_figures():
    for key in ("lat_gpu", "lat_gpu_loaded", "lat_h2d", "lat_p2p", "lat_memcpy"):
        case = get_case(key)
        assert case.target == "gpu" and case.metric == "latency", key
    for key in HOST_LATENCY_KEYS:
        case = get_case(key)
        assert case.target == "host" and case.metric == "latency", key


def test_a_whole_key_selects_that_case_alone_and_a_prefix_every_match():
    assert [c.key for c in select_cases("lat_host")] == ["lat_host"]
    assert [c.key for c in select_cases("lat_gpu")] == ["lat_gpu"]
    assert [c.key for c in select_cases("lat_host_")] == ["lat_host_numa", "lat_host_loaded"]
    assert [c.key for c in select_cases("lat_")] == [
        *HOST_LATENCY_KEYS, "lat_gpu", "lat_gpu_loaded", "lat_h2d", "lat_p2p", "lat_memcpy"]


def test_host_cases_count_bytes_the_stream_way():
    weights = {"ddr_copy": 2, "ddr_scale": 2, "ddr_add": 3, "ddr_triad": 3, "ddr_dot": 2}
    for key, arrays in weights.items():
        case = get_case(key)
        assert case.target == "host"
        assert case.byte_convention == "traffic"
        assert case.bytes_per_op(8 * 1000) == arrays * 8 * 1000


def test_gpu_cases_need_a_gpu_and_p2p_needs_two():
    for key in GPU_KEYS:
        assert get_case(key).target == "gpu"
        assert get_case(key).min_gpus >= 1
    assert get_case("p2p_copy").min_gpus == 2
    assert get_case("lat_p2p").min_gpus == 2
    assert {c.key for c in CASES if c.whole_node} == {
        "h2d_all", "d2h_all", "h2d_all_bidir", "one_to_all", "all_to_one", "p2p_all_pairs",
        "p2p_copy", "p2p_bidir", "lat_p2p", *PEER_SM_KEYS}
    for key in (*PEER_SM_KEYS, "one_to_all", "all_to_one", "p2p_all_pairs"):
        assert get_case(key).min_gpus == 2, key
    assert get_case("d2d_copy").byte_convention == "traffic"
    assert get_case("h2d_pinned").byte_convention == "copy"


def test_select_by_key_prefix_and_list_keeps_registry_order():
    assert [c.key for c in select_cases("ddr_triad,ddr_copy")] == ["ddr_copy", "ddr_triad"]
    assert [c.key for c in select_cases("ddr_")] == DDR_KEYS
    assert [c.key for c in select_cases(" hbm_triad , ddr_dot ")] == ["ddr_dot", "hbm_triad"]
    assert select_cases(None, fleet=True) == CASES


def test_an_unknown_case_says_where_the_keys_are_and_the_nearest_one():
    with pytest.raises(BwprofError, match=r"unknown case or prefix 'nope'; .*`bwprof list`"):
        select_cases("ddr_copy,nope")
    with pytest.raises(BwprofError, match=r"'hbm_tirad' \(did you mean hbm_triad\?\); "):
        select_cases("hbm_tirad")
    with pytest.raises(BwprofError, match=r"'DDR_COPY' \(did you mean ddr_copy\?\); "):
        select_cases("DDR_COPY")
    with pytest.raises(BwprofError, match="empty"):
        select_cases(" , ")
    with pytest.raises(BwprofError, match="unknown case 'x'"):
        get_case("x")


def test_the_fleet_case_runs_over_mpi_and_counts_bytes_copied():
    case = get_case("net_p2p")
    assert (case.target, case.byte_convention, case.direction) == ("mpi", "copy", "net")


def test_the_default_selection_holds_fleet_cases_only_in_a_fleet_run():
    assert "net_p2p" not in {c.key for c in select_cases(None)}
    assert "net_p2p" in {c.key for c in select_cases(None, fleet=True)}
    assert [c.key for c in select_cases("net_")] == ["net_p2p"]  # asked for: always


def test_gpu_stream_cases_count_bytes_the_stream_way():
    weights = {"hbm_copy": 2, "hbm_scale": 2, "hbm_add": 3, "hbm_triad": 3, "hbm_dot": 2,
               "d2d_copy": 2}
    for key, arrays in weights.items():
        assert get_case(key).bytes_per_op(8000) == arrays * 8000, key


def test_the_catalogue_loads_without_numba_or_cupy():
    """`bwprof list`, `report` and the plan read the case table: it must stay cheap, and
    must not import Numba before the tests' CUDA simulator is switched on."""
    import subprocess
    import sys

    probe = ("import sys, bwprof.cases, bwprof.plan; "
             "print(sorted(m for m in ('numba', 'cupy', 'pynvml') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_every_gpu_case_is_declared_once_with_how_it_runs():
    from bwprof.gpu.cases import GPU_CASES, GpuCase

    gpu = [case for case in CASES if case.target == "gpu"]
    assert gpu == list(GPU_CASES) and all(isinstance(case, GpuCase) for case in gpu)
    assert all(callable(case.run) and callable(case.expand) and callable(case.needs)
               for case in gpu)
    assert {case.window for case in gpu} <= {"none", "largest", "matrix"}
    pairs = [case.key for case in gpu if case.pair_slots]
    assert pairs == ["p2p_copy", "p2p_bidir", *PEER_SM_KEYS, "lat_p2p"]


def test_sm_copies_count_bytes_as_their_copy_engine_rows_do():
    """Each SM copy sits beside its copy engine's row: the same convention, factor and bytes
    copied once (so both carry the copy figure)."""
    beside = {"h2d_sm": "h2d_pinned", "d2h_sm": "d2h_pinned", "d2d_sm": "d2d_copy",
              "p2p_read": "p2p_copy", "p2p_read_sm": "p2p_copy", "p2p_write_sm": "p2p_copy",
              "p2p_bidir_sm": "p2p_bidir"}
    for key, engine in beside.items():
        sm, ce = get_case(key), get_case(engine)
        assert (sm.byte_convention, sm.bytes_factor, sm.copied_factor) == (
            ce.byte_convention, ce.bytes_factor, ce.copied_factor) == (
            ce.byte_convention, ce.bytes_factor, 1), key
        assert (sm.memory, sm.direction) == (ce.memory, ce.direction), key
