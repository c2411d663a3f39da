import itertools

import numpy as np
import pytest

from bwprof.errors import BwprofError
from bwprof.plan import (
    DEFAULT_HOST_ARRAY_BYTES,
    PRESETS,
    default_host_array_bytes,
    make_plan,
    parse_int_list,
    parse_size,
)
from bwprof.units import GiB, KiB, MiB

MACHINE = {"usable_cpus": 4, "llc_bytes": 32 * MiB, "memory_available_bytes": 16 * GiB}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("256MiB", 256 * MiB), ("256M", 256 * MiB), ("1GiB", GiB), ("1g", GiB),
     ("64k", 64 * KiB), ("1.5GiB", 3 * GiB // 2), ("2GB", 2 * 10**9), ("10 MB", 10**7)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "12Q", "-5M", "1e6", "0", "M"])
def test_parse_size_rejects_malformed(text):
    with pytest.raises(BwprofError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(("text", "whole"), [("8192.5", 8192), ("1.0000001MiB", 1048576),
                                             ("0.1MiB", 104856)])
def test_a_size_of_fractional_bytes_is_refused_not_truncated(text, whole):
    """int() would run 8192.5 as 8192 bytes, a size the user never asked for."""
    with pytest.raises(BwprofError, match=rf"--size '{text}' is .* bytes, not a whole number; "
                                          rf"give whole bytes, e\.g\. {whole}$"):
        parse_size(text)


def test_parse_int_list():
    assert parse_int_list("1,2, 4,2", "--threads") == (1, 2, 4)
    assert parse_int_list("2,", "--threads") == (2,)  # a trailing comma, as --cases allows
    with pytest.raises(BwprofError, match="comma-separated list of integers"):
        parse_int_list(",", "--threads")


def test_a_size_that_is_not_whole_float64_elements_is_refused():
    with pytest.raises(BwprofError, match=r"--size 10001 B is not a whole number of float64 "
                                          r"elements \(8 bytes each\); use 10000 or 10008"):
        make_plan(size="10001", usable_cpus=2, llc_bytes=None, memory_available_bytes=8 << 30)
    with pytest.raises(BwprofError, match="--size 7 B is too small"):  # not "use 0 or 8"
        make_plan(size="7", usable_cpus=2, llc_bytes=None, memory_available_bytes=8 << 30)
    plan = make_plan(size="1MiB,", usable_cpus=2, llc_bytes=None, memory_available_bytes=8 << 30)
    assert plan.host_array_bytes == (1 << 20,)
    with pytest.raises(BwprofError, match="--threads expects"):
        parse_int_list("1,x", "--threads")


def test_default_host_arrays_are_at_least_four_times_the_llc():
    assert default_host_array_bytes(32 * MiB) == 128 * MiB
    assert default_host_array_bytes(3 * MiB + 1) >= 4 * (3 * MiB + 1)
    assert default_host_array_bytes(1 * MiB) == 32 * MiB  # floor keeps small caches honest
    assert default_host_array_bytes(None) == DEFAULT_HOST_ARRAY_BYTES


def test_presets():
    assert PRESETS["quick"].transfer_sizes == (64 * KiB, MiB, 16 * MiB, 256 * MiB)
    standard = PRESETS["standard"].transfer_sizes
    assert standard[0] == 4 * KiB and standard[-1] == GiB
    assert all(b == 4 * a for a, b in itertools.pairwise(standard))
    assert PRESETS["full"].transfer_sizes[-1] == 4 * GiB
    assert PRESETS["standard"].repeats >= 10


def test_make_plan_defaults():
    plan = make_plan(**MACHINE)
    assert plan.preset == "standard"
    assert plan.threads == (4,)
    assert plan.host_array_bytes == (128 * MiB,)
    assert plan.repeats == 10
    assert {c.key for c in plan.host_cases} == {"ddr_copy", "ddr_scale", "ddr_add",
                                                "ddr_triad", "ddr_dot", "lat_host",
                                                "lat_host_numa", "lat_host_loaded",
                                                "gemm_host"}
    assert plan.as_dict()["cases"][0] == "ddr_copy"


def test_make_plan_sweeps_threads_and_sizes():
    plan = make_plan(threads="1,2", size="8MiB,16MiB", cases="ddr_triad", **MACHINE)
    assert plan.threads == (1, 2)
    assert plan.host_array_bytes == (8 * MiB, 16 * MiB)


def test_the_python_api_takes_one_integer_where_the_cli_takes_a_list():
    plan = make_plan(**{**MACHINE, "threads": 2, "size": 8 * MiB})
    assert plan.threads == (2,) and plan.host_array_bytes == (8 * MiB,)
    plan = make_plan(**{**MACHINE, "threads": [1, 2, 1], "size": (8 * MiB,)})
    assert plan.threads == (1, 2)
    plan = make_plan(**{**MACHINE, "threads": np.int64(2), "size": np.array([8 * MiB])})
    assert plan.threads == (2,) and plan.host_array_bytes == (8 * MiB,)
    assert type(plan.threads[0]) is int


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"preset": "huge"}, "unknown preset 'huge'"),
        ({"repeats": 1}, "--repeats must be from 2"),
        ({"repeats": 1001}, "--repeats must be from 2 .* to 1000, got 1001"),
        ({"threads": 1.5}, "--threads expects an integer, a list of integers"),
        ({"threads": [True]}, "--threads expects an integer"),
        ({"size": 8.0}, "--size expects an integer"),
        ({"size": "9" * 400 + "TiB"}, "is too large; a host array is at most 1073741824 GiB"),
        ({"size": "2EiB"}, "malformed size"),
        ({"size": str(1 << 61)}, "is too large; a host array is at most"),
        ({"repeats": 2.5}, "--repeats must be a whole number, got 2.5"),
        ({"repeats": "3"}, "--repeats must be a whole number, got '3'"),
        ({"repeats": float("nan")}, "--repeats must be a whole number, got nan"),
        ({"repeats": 10**5000}, "--repeats must be from 2 .* got a number of about 5001 "
                                "digits"),
        ({"threads": 10**5000}, r"--threads a number of about 5001 digits is outside 1\.\.4"),
        ({"threads": "9" * 5000}, r"--threads 9{28}\.\.\.9{6} \(5000 characters\) is far "
                                  r"too large a count"),
        ({"preset": "9" * 5000}, r"unknown preset '9{28}\.\.\.9{6} \(5000 characters\)'"),
        ({"threads": "5"}, r"--threads 5 is outside 1\.\.4"),
        ({"threads": "0"}, "--threads 0 is outside"),
        ({"size": "4KiB"}, "too small"),
        ({"size": "8GiB"}, "more than 60% of the 16 GiB available"),
        ({"cases": "bogus"}, "unknown case"),
    ],
)
def test_make_plan_rejects_bad_input(options, message):
    with pytest.raises(BwprofError, match=message):
        make_plan(**{**MACHINE, **options})


def test_default_size_shrinks_to_fit_a_small_machine():
    plan = make_plan(usable_cpus=2, llc_bytes=256 * MiB, memory_available_bytes=1 * GiB)
    (size,) = plan.host_array_bytes
    assert 3 * size <= 0.6 * GiB


@pytest.mark.parametrize("available", [1 * GiB, int(7677.5 * MiB)])
def test_a_size_too_large_for_memory_names_the_largest_that_fits(available):
    with pytest.raises(BwprofError) as info:
        make_plan(size="8GiB", usable_cpus=2, llc_bytes=None, memory_available_bytes=available)
    message = str(info.value)
    assert "needs 24 GiB for 3 arrays, more than 60% of the " in message
    suggested = message.rsplit("--size ", 1)[1].split()[0]  # "1535MiB": pasted as it is
    most = parse_size(suggested)
    assert 3 * most <= 0.6 * available < 3 * (most + MiB)
    make_plan(size=suggested, usable_cpus=2, llc_bytes=None,
              memory_available_bytes=available)  # the size it names is taken


def test_default_arrays_take_at_most_a_quarter_of_the_ram():
    """A box in service keeps three quarters of its RAM while bwprof chooses its sizes: a
    300 MiB L3 with 4 GiB of RAM gets arrays under 4x the cache (flagged in_cache), not 3.6
    GiB of arrays."""
    plan = make_plan(usable_cpus=2, llc_bytes=300 * MiB, memory_available_bytes=4 * GiB,
                     memory_total_bytes=4 * GiB)
    (size,) = plan.host_array_bytes
    assert 3 * size <= GiB and size % MiB == 0 and not plan.size_given
    roomy = make_plan(usable_cpus=2, llc_bytes=300 * MiB, memory_available_bytes=20 * GiB,
                      memory_total_bytes=24 * GiB)
    assert roomy.host_array_bytes == (1200 * MiB,)


def test_a_given_size_may_take_more_than_the_default_share():
    plan = make_plan(size="1GiB", usable_cpus=2, llc_bytes=None, memory_available_bytes=6 * GiB,
                     memory_total_bytes=8 * GiB)
    assert plan.host_array_bytes == (GiB,) and plan.size_given


def test_a_latency_chase_alone_needs_one_working_set_not_three_arrays():
    plan = make_plan(cases="lat_host", size="3GiB", usable_cpus=2, llc_bytes=None,
                     memory_available_bytes=8 * GiB)
    assert plan.host_array_bytes == (3 * GiB,)
    with pytest.raises(BwprofError, match="needs 6 GiB for its working set"):
        make_plan(cases="lat_host", size="6GiB", usable_cpus=2, llc_bytes=None,
                  memory_available_bytes=8 * GiB)
    with pytest.raises(BwprofError, match="needs 9 GiB for 3 arrays"):
        make_plan(cases="lat_host,ddr_triad", size="3GiB", usable_cpus=2, llc_bytes=None,
                  memory_available_bytes=8 * GiB)


def test_sizes_are_parsed_exactly_above_2_to_the_53():
    """A float holds whole numbers exactly only up to 2^53: 2^53 + 1 would become 2^53."""
    assert parse_size(str(2**53 + 8)) == 2**53 + 8
    assert parse_size("1099511627777KiB") == 1099511627777 * KiB
    assert parse_size("0.5GB") == 500_000_000


def test_a_size_from_python_is_held_to_the_same_limit_as_typed_text():
    with pytest.raises(BwprofError, match="is too large; a host array is at most"):
        make_plan(size=[1 << 62], usable_cpus=2, llc_bytes=None, memory_available_bytes=None)


def test_numba_s_thread_limit_caps_the_default_and_refuses_more():
    """NUMBA_NUM_THREADS=2 on a 4-CPU machine: numba cannot run 4 threads (set_num_threads
    raises), so the default is 2, and --threads 3 is refused naming both numbers."""
    from bwprof.plan import thread_cap_note

    assert make_plan(**MACHINE, numba_threads=2).threads == (2,)
    assert make_plan(**MACHINE, numba_threads=8).threads == (4,)  # the CPUs bound it first
    assert make_plan(**MACHINE, threads="1,2", numba_threads=2).threads == (1, 2)
    with pytest.raises(BwprofError, match=r"^--threads 3 is more than the 2 thread\(s\) "
                                          r"NUMBA_NUM_THREADS=2 lets numba run; set "
                                          r"NUMBA_NUM_THREADS=3 or more"):
        make_plan(**MACHINE, threads="1,3", numba_threads=2)
    assert thread_cap_note(4, 2) == ("host cases use 2 thread(s), the NUMBA_NUM_THREADS=2 "
                                     "limit, not all 4 CPUs this process may use")
    assert thread_cap_note(4, None) is None and thread_cap_note(4, 4) is None


# Catches (issue 37): `--threads 1,,2` taken as 1,2 (a count a script left out, unsaid)
@pytest.mark.parametrize("text", ["1,,2", ",1", "1, ,2", ",,"])
def test_an_empty_thread_count_between_commas_is_refused(text):
    with pytest.raises(BwprofError, match=r"^--threads (.* has an empty entry between "
                                          r"commas|expects a comma-separated list)"):
        parse_int_list(text, "--threads")
