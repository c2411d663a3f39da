"""PTX compilation of the CUDA kernels and the parser of global loads and stores.

The parser and --cc parsing are pure; compiling needs the real numba.cuda (not the simulator),
so it runs in subprocesses without NUMBA_ENABLE_CUDASIM: `python -m bwprof kernels`, and one
that compiles every kernel for the tests that read its PTX (`sm90_ptx`).
NVVM from numba-cuda's cu12 extra is enough: no GPU or driver is needed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bwprof.cli import app
from bwprof.errors import BwprofError
from bwprof.gpu.ptx import (
    AccessType,
    GlobalAccesses,
    KernelPtx,
    global_accesses,
    parse_cc,
    ptx_target,
    report_lines,
)
from tests.conftest import env_without_cudasim

REPO = Path(__file__).resolve().parents[2]

HAND_WRITTEN_PTX = """\
.version 8.5
.target sm_90
.address_size 64
.common .global .align 8 .u64 _ZN08NumbaEnv6kernel;
.visible .entry kernel(.param .u64 p0)
{
\tld.param.u64 \t%rd1, [p0];
\tld.global.f64 \t%fd1, [%rd2];
\tld.global.f64 \t%fd2, [%rd3];   // second element
\tld.global.nc.v2.f64 \t{%fd3, %fd4}, [%rd4];
\t@%p1 ld.global.u32 \t%r1, [%rd5];
\t@!%p2 ldu.global.b128 \t%rq1, [%rd9];
\tld.relaxed.gpu.global.L1::evict_last.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd6];
\tld.shared.f64 \t%fd5, [%r2];
\tld.f64 \t%fd6, [%rd7];
\tst.global.v4.f32 \t[%rd8], {%f1, %f2, %f3, %f4};
\tst.global.b64 \t[%rd8+8], %rd10;
\tst.global.f64 \t[%rd8+16], %fd1;
\tst.local.f64 \t[%rd1], %fd1;
\tst.global.u8 \t[%rd8+24], %rs1;
\t// st.global.f64 \t[%rd8], %fd1;   commented out, not counted
\tret;
}
"""


def test_parser_counts_global_instructions_by_shape():
    found = global_accesses(HAND_WRITTEN_PTX)
    assert found.loads == {
        AccessType(1, "f64"): 2,
        AccessType(2, "f64"): 1,
        AccessType(1, "u32"): 1,
        AccessType(1, "b128"): 1,
        AccessType(4, "f32"): 1,
    }
    assert found.stores == {
        AccessType(4, "f32"): 1,
        AccessType(1, "b64"): 1,
        AccessType(1, "f64"): 1,
        AccessType(1, "u8"): 1,
    }
    assert found.load_count == 6
    assert found.store_count == 4


def test_widths_are_vector_count_times_element_bits():
    assert AccessType(1, "f64").bits == 64
    assert AccessType(2, "f64").bits == 128
    assert AccessType(4, "f32").bits == 128
    assert AccessType(1, "u32").bits == 32
    assert AccessType(1, "b128").bits == 128
    assert AccessType(1, "u8").bits == 8
    assert AccessType(2, "f16x2").bits == 64
    assert AccessType(4, "bf16").bits == 64


def test_describe_and_has():
    found = global_accesses(HAND_WRITTEN_PTX)
    assert found.describe("ld") == (
        "ld 1x b128(128b), 1x v2.f64(128b), 1x v4.f32(128b), 2x f64(64b), 1x u32(32b)"
    )
    assert found.describe("st") == "st 1x v4.f32(128b), 1x b64(64b), 1x f64(64b), 1x u8(8b)"
    assert found.has("ld", 128)
    assert not found.has("st", 256)
    assert GlobalAccesses().describe("ld") == "ld none"
    assert global_accesses("\tld.global.f64 \t%fd1, [%rd2];").describe("ld") == "ld 1x f64(64b)"


def test_parser_ignores_non_global_and_declarations():
    ptx = "\n".join([
        ".common .global .align 8 .u64 env;",
        ".global .align 4 .b8 buffer[16];",
        "\tld.param.u64 %rd1, [p];",
        "\tld.const.f64 %fd1, [c];",
        "\tst.shared.f64 [%r1], %fd1;",
        "\tst.f64 [%rd1], %fd1;",
        "\tatom.global.add.f64 %fd2, [%rd1], %fd1;",
        "\tcvta.to.global.u64 %rd2, %rd1;",
    ])
    found = global_accesses(ptx)
    assert found.load_count == 0
    assert found.store_count == 0


def test_ptx_target():
    assert ptx_target(HAND_WRITTEN_PTX) == "sm_90"
    assert ptx_target("ld.global.f64 %fd1, [%rd1];") is None


@pytest.mark.parametrize(
    ("text", "cc"), [("9.0", (9, 0)), ("8.6", (8, 6)), ("10.0", (10, 0)), (" 12.1 ", (12, 1))]
)
def test_parse_cc_accepts_major_minor(text, cc):
    assert parse_cc(text) == cc


@pytest.mark.parametrize("text", ["9", "9.", ".0", "sm_90", "9.0.1", "nine", "", "9,0", "-9.0"])
def test_parse_cc_rejects_other_forms(text):
    with pytest.raises(BwprofError, match=r"--cc expects MAJOR\.MINOR such as 9\.0"):
        parse_cc(text)


def test_report_lines_show_failures():
    lines = report_lines(
        [KernelPtx("copy", ok=True, target="sm_90",
                   accesses=global_accesses("ld.global.f64 %fd1, [%rd1];")),
         KernelPtx("dot", ok=False, error="NvvmError: boom")],
        (9, 0),
    )
    assert lines[0].split() == ["copy", "ok", "ld", "1x", "f64(64b)", "st", "none"]
    assert lines[1].split()[:3] == ["dot", "FAILED", "NvvmError:"]
    assert lines[-1] == (
        "2 kernel(s) for compute capability 9.0 (PTX target sm_90): 1 compiled, 1 failed"
    )


def test_kernels_command_compiles_every_kernel_to_ptx():
    from bwprof.gpu.kernels import KERNELS

    done = subprocess.run(
        [sys.executable, "-m", "bwprof", "kernels", "--cc", "9.0"],
        cwd=REPO, env=env_without_cudasim(), capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[:-1]}
    for name in KERNELS:
        assert name in rows, done.stdout
        assert rows[name].split()[1] == "ok", rows[name]
    for name in ("copy", "scale", "add", "triad", "dot"):
        loads, stores = rows[name].split("ok", 1)[1].split("st ", 1)
        assert "f64(64b)" in loads, rows[name]  # at least one 64-bit global load
        assert "f64(64b)" in stores, rows[name]  # writes its output (dot: one partial per block)
    assert rows["init"].split()[2:4] == ["ld", "none"]
    assert "f64(64b)" in rows["init"].split("st ", 1)[1]
    assert rows["hold"].split()[2:] == ["ld", "none", "st", "none"]
    # The chase: 64-bit index loads, its end stored back, and loads fed by loaded values.
    assert "u64(64b)" in rows["chase"].split("st ", 1)[0], rows["chase"]
    assert "ld dependent on a loaded value" in rows["chase"], rows["chase"]
    assert rows["chase"].endswith(": one dependent ld a step)"), rows["chase"]
    for name in ("copy", "load"):
        assert "dependent" not in rows[name], rows[name]
    # The SM copy: 64-bit loads and stores, four loads in flight before its loop's stores.
    assert "u64(64b)" in rows["sm_copy"].split("st ", 1)[0], rows["sm_copy"]
    assert "u64(64b)" in rows["sm_copy"].split("st ", 1)[1], rows["sm_copy"]
    assert rows["sm_copy"].endswith("(4 ld in flight before a st)"), rows["sm_copy"]
    # Copy and scale: sm_copy's depth, four loads in flight before their loop's stores.
    for name in ("copy", "scale"):
        assert rows[name].endswith("(4 ld in flight before a st)"), rows[name]
    # Each FMA kernel's line: its loop's share of FMA instructions, of its own type.
    for name, dtype in (("fma_fp32", "f32"), ("fma_fp64", "f64")):
        share = re.search(rf"\(loop (\d+\.\d)% fma\.rn\.{dtype}: (\d+) of (\d+) "
                          r"instructions\)$", rows[name])
        assert share, rows[name]
        assert float(share.group(1)) >= 90.0, rows[name]
    for name in ("copy", "triad", "dot", "compute", "sm_copy"):
        assert "fma" not in rows[name].split("ok", 1)[1], rows[name]
    summary = done.stdout.splitlines()[-1]
    assert "sm_90" in summary
    assert f"{len(KERNELS)} compiled, 0 failed" in summary


SM90_PTX = """
import json
from numba import cuda, int32, uint32
from bwprof.gpu.kernels import KERNELS

# Controls, never launched: how numba writes an index held in 32 bits, which the 64-bit
# check must catch (each wraps past 2^31 or 2^32 elements).
def u32_index(a, b):
    i = uint32(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x)
    if i < a.size:
        b[i] = a[i]

def i32_grid_stride(a, b):
    i = int32(cuda.grid(1))
    stride = int32(cuda.gridsize(1))
    while i < a.size:
        b[i] = a[i]
        i = int32(i + stride)

def truncated_index(a, b):
    i = cuda.grid(1)
    if i < a.size:
        b[i] = a[int32(i)]

ARRAYS = "void(float64[::1], float64[::1])"
ptx = {name: cuda.compile_ptx(spec.function, spec.signature, cc=(9, 0))[0]
       for name, spec in KERNELS.items()}
for control in (u32_index, i32_grid_stride, truncated_index):
    ptx["control_" + control.__name__] = cuda.compile_ptx(control, ARRAYS, cc=(9, 0))[0]
print(json.dumps(ptx))
"""
CONTROLS = ("control_u32_index", "control_i32_grid_stride", "control_truncated_index")
"""Kernels of SM90_PTX that are not bwprof's: 32-bit indices, as numba compiles them."""


@pytest.fixture(scope="module")
def sm90_ptx() -> dict[str, str]:
    """{kernel: its sm_90 PTX}, compiled once for the tests that read the code itself (one
    process: each compile in its own took about 1.3 s, most of it numba.cuda's start), and
    the CONTROLS beside them."""
    done = subprocess.run([sys.executable, "-c", SM90_PTX], cwd=REPO, env=env_without_cudasim(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_stream_kernels_first_element_costs_no_division(sm90_ptx):
    """With the default grid each thread owns one element (copy and scale, two); its first
    load or store must come before any trip-count division (a `range` loop puts a `div`
    ahead of it)."""
    import re

    for name in ("copy", "scale", "add", "triad"):  # timed; init is not
        lines = sm90_ptx[name].splitlines()
        access, division = (next((n for n, line in enumerate(lines) if re.search(pattern, line)),
                                 None) for pattern in (r"\b(ld|st)\.global\.", r"\bdiv\."))
        assert access is not None, name
        assert division is None or access < division, (name, access, division)


def test_the_chase_loop_is_one_dependent_global_load_per_step(sm90_ptx):
    """sm_90 PTX of the chase: in every loop (LLVM unrolls it) each global load's address
    is computed from the value the previous load returned, and nothing else touches global
    memory; outside the loops only the start position is loaded."""
    from bwprof.gpu.ptx import dependent_loads, loop_bodies

    ptx = sm90_ptx["chase"]
    lines = ptx.splitlines()
    loops = [(*dependent_loads(ptx, body),
              global_accesses("\n".join(lines[n] for n in body)).store_count)
             for body in loop_bodies(ptx)]
    assert loops, ptx
    for loads, dependent, stores in loops:
        assert loads >= 1 and dependent == loads and stores == 0, loops
    loads, dependent = dependent_loads(ptx)
    assert dependent == loads - 1, (loads, dependent)  # the one load of the state's start


def _address_writers(ptx: str, body: range) -> list[set[str]]:
    """For each global load in `body` (lines of `ptx`), the opcodes of every instruction of
    the kernel that writes its address register (PTX registers are rewritten around loops)."""
    from bwprof.gpu.ptx import _code_lines, _global_load

    code = _code_lines(ptx)
    writers: dict[str, set[str]] = {}
    for line in code:
        parts = re.sub(r"^@!?%\w+\s+", "", line).split(None, 1)
        if len(parts) != 2 or parts[0].startswith((".", "$", "st.", "bra", "setp", "atom")):
            continue
        destination = re.findall(r"%\w+", parts[1].split("[", 1)[0])
        if destination:
            writers.setdefault(destination[0], set()).add(parts[0])
    return [writers.get(load[1], set()) for n in body
            if (load := _global_load(code[n])) is not None]


def test_nothing_but_the_load_lies_between_two_dependent_loads_of_the_chase(sm90_ptx):
    """The chain holds device addresses: in every loop of the chase's sm_90 PTX each global
    load's address register is written by global loads alone (`ld.global.u64 %rd41,
    [%rd40]`), no index arithmetic between a load's value and the next load's address (an
    index chase shifts and adds: LEA and LEA.HI.X in SASS, 10-25% of an L1 hit's time)."""
    from bwprof.gpu.ptx import loop_bodies

    ptx = sm90_ptx["chase"]
    found = [(body, writers) for body in loop_bodies(ptx)
             for writers in _address_writers(ptx, body)]
    assert found, ptx
    for body, writers in found:
        assert writers and all(op.startswith("ld.global") for op in writers), (body, writers)
    # The check tells an index chase apart: its address is an add of the shifted index.
    (old,) = loop_bodies(CHASE_PTX)
    assert {"add.s64"} in _address_writers(CHASE_PTX, old)


def test_the_chase_loads_through_numba_cudas_own_intrinsic_as_one_ld_global_u64(sm90_ptx):
    """address.load_u64 is numba-cuda's intrinsic (`numba.cuda.extending`: numba-cuda is
    splitting its typing from numba core's), and the chase's sm_90 PTX steps by `ld.global.u64`
    alone (a global, not a generic, load; the PTX was the same with numba core's intrinsic,
    less the kernel's mangled version number)."""
    import re

    from bwprof.gpu.ptx import loop_bodies

    done = subprocess.run(
        [sys.executable, "-c", "from bwprof.gpu.address import load_u64; "
                               "print(type(load_u64).__module__)"],
        cwd=REPO, env=env_without_cudasim(), capture_output=True, text=True, timeout=300,
        check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "numba.cuda.extending"
    ptx = sm90_ptx["chase"]
    lines = ptx.splitlines()
    loads = [lines[n].split()[0] for body in loop_bodies(ptx) for n in body
             if re.match(r"\s*(@%\w+\s+)?ld\.(global\.)?\w+", lines[n])
             and "ld.param" not in lines[n]]
    assert loads and set(loads) == {"ld.global.u64"}, loads


CHASE_PTX = """\
\tld.global.u64 \t%rd6, [%rd2];
$L__BB0_4:
\tshl.b64 \t%rd34, %rd6, 3;
\tadd.s64 \t%rd35, %rd1, %rd34;
\tld.global.u64 \t%rd6, [%rd35];
\tadd.s64 \t%rd7, %rd1, 8;
\tld.global.f64 \t%fd1, [%rd7];
\t@%p6 bra \t$L__BB0_4;
"""


def test_dependent_loads_follow_a_loaded_value_into_an_address():
    from bwprof.gpu.ptx import dependent_loads, loop_bodies

    assert dependent_loads(CHASE_PTX) == (3, 1)
    (body,) = loop_bodies(CHASE_PTX)
    assert (body.start, body.stop) == (1, 8)
    assert dependent_loads(CHASE_PTX, body) == (2, 1)
    assert dependent_loads(HAND_WRITTEN_PTX) == (6, 0)


@pytest.mark.parametrize("bad", ["9", "sm_90", "x.y"])
def test_kernels_command_rejects_malformed_cc(bad):
    result = CliRunner().invoke(app, ["kernels", "--cc", bad])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: --cc expects MAJOR.MINOR")


@pytest.mark.parametrize("cc", ["99.0", "1.0"])
def test_kernels_command_refuses_a_cc_the_toolkit_does_not_compile_for(cc):
    """numba-cuda would compile 99.0 for its newest target and 1.0 not at all (one error
    per kernel): both are one usage line instead."""
    done = subprocess.run(
        [sys.executable, "-m", "bwprof", "kernels", "--cc", cc],
        cwd=REPO, env=env_without_cudasim(), capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: this CUDA toolkit does not compile for compute "
                               f"capability {cc}; it knows ")
    assert "9.0" in lines[0]


def test_kernels_command_refuses_the_simulator():
    from numba import config

    if not config.ENABLE_CUDASIM:
        pytest.skip("this process uses the real CUDA target")
    result = CliRunner().invoke(app, ["kernels", "--cc", "9.0"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error:")
    assert "unset NUMBA_ENABLE_CUDASIM" in lines[0]


def test_loads_in_flight_are_the_loads_a_loop_issues_before_its_first_store():
    from bwprof.gpu.ptx import loads_in_flight

    body = [f"\tld.global.u64 \t%rd{n}, [%rd9];" for n in range(4)]
    stores = [f"\tst.global.u64 \t[%rd8], %rd{n};" for n in range(4)]
    loop = "\n".join(["$L__BB0_2:", *body, "\tld.shared.f64 \t%fd1, [%r1];", *stores,
                      "\t@%p1 bra \t$L__BB0_2;"])
    tail = "\n".join(["$L__BB0_5:", body[0], stores[0], "\t@%p2 bra \t$L__BB0_5;"])
    assert loads_in_flight(loop + "\n" + tail) == 4
    assert loads_in_flight(tail) == 1
    assert loads_in_flight("\n".join(body)) == 0  # no loop


def test_the_report_says_whether_every_loop_load_of_a_chase_waits_for_the_last():
    from bwprof.gpu.ptx import KernelPtx

    def line(loops):
        result = KernelPtx("chase", ok=True, target="sm_90", dependent_loads=5,
                           loop_loads=loops)
        return report_lines([result], (9, 0))[0]

    assert line(((1, 1), (4, 4))).endswith(
        "(5 ld dependent on a loaded value; in its loops 1/1, 4/4: one dependent ld a step)")
    mixed = line(((1, 1), (4, 3)))  # one load of the unrolled loop does not wait: prefetchable
    assert "one dependent ld a step" not in mixed
    assert mixed.endswith("in its loops 1/1, 3/4 ld dependent: some loads do not wait for the "
                          "last)")
    assert line(()).endswith("(5 ld dependent on a loaded value)")


FMA_SHARE = 0.90
"""The issue's bar: at least this share of an FMA kernel's hottest loop is FMA instructions.
The old loop (8 FMA a trip, the 64-bit range counter re-checked after each, LLVM unrolling
it 4x) was 32 FMA of 45 PTX instructions (71%), 32 of 53 in SASS."""


@pytest.mark.parametrize(("name", "dtype"), [("fma_fp32", "f32"), ("fma_fp64", "f64")])
def test_the_fma_kernels_loop_is_at_least_90_percent_fma(sm90_ptx, name, dtype):
    """sm_90 PTX of fma_fp32 and fma_fp64: the hottest loop is fma.rn of the kernel's own
    type in at least FMA_SHARE of its instructions (loop overhead under 10%, here ~1%), and
    it holds every chain, unrolled: FMA_CHAINS x FMA_UNROLL FMAs a trip."""
    from bwprof.gpu.kernel_params import FMA_CHAINS, FMA_UNROLL
    from bwprof.gpu.ptx import fma_share

    loop = fma_share(sm90_ptx[name])
    assert loop is not None, name
    assert loop.dtype == dtype, loop
    assert loop.share >= FMA_SHARE, loop
    assert loop.fma == FMA_CHAINS * FMA_UNROLL, loop


def test_copy_and_scale_keep_four_loads_in_flight_and_never_divide(sm90_ptx):
    """sm_90 PTX of copy and scale: their loop issues four global loads before its first
    store (sm_copy's depth), and no `div` anywhere (the tail is three tests, not a loop
    whose trip count LLVM divides out)."""
    from bwprof.gpu.ptx import loads_in_flight

    for name in ("copy", "scale"):
        assert loads_in_flight(sm90_ptx[name]) >= 4, name
        assert not re.search(r"\bdiv\.", sm90_ptx[name]), name
    assert loads_in_flight(sm90_ptx["sm_copy"]) == 4


FULL_SM_REGISTERS = 32
"""Registers a thread may use for 2048 threads to fit an sm_90 SM's 65,536: fma_gpu's grid is
8 blocks of 256 on every SM, and copy and scale rely on full SMs for their loads in flight."""


@pytest.mark.parametrize("name", ["fma_fp32", "fma_fp64", "copy", "scale"])
def test_the_unrolled_kernels_fit_a_full_sm_without_spilling(sm90_ptx, tmp_path, name):
    """ptxas (the CUDA toolkit's assembler, no GPU needed) on the sm_90 PTX: unrolling must
    not cost occupancy (at most FULL_SM_REGISTERS registers a thread) nor spill to local
    memory. fma: 8 chains in registers, 25-26 registers; copy and scale: 30."""
    import shutil

    ptxas = shutil.which("ptxas") or ("/usr/local/bin/ptxas"
                                      if Path("/usr/local/bin/ptxas").exists() else None)
    if ptxas is None:
        pytest.skip("no ptxas on this machine")
    source = tmp_path / f"{name}.ptx"
    source.write_text(sm90_ptx[name])
    done = subprocess.run([ptxas, "-arch=sm_90", "-v", str(source), "-o",
                           str(tmp_path / f"{name}.cubin")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    used = re.search(r"Used (\d+) registers", done.stderr)
    assert used, done.stderr
    assert int(used.group(1)) <= FULL_SM_REGISTERS, done.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in done.stderr, done.stderr


FMA_LOOPS_PTX = """\
.reg .f32 \t%f<300>;
{
\tmov.u64 \t%rd20, 0;
$L__BB0_3:
\t.pragma "nounroll";
\tfma.rn.f32 \t%f1, %f1, %f57, %f58;
\tfma.rn.f32 \t%f2, %f2, %f57, %f58;
\tadd.s64 \t%rd39, %rd39, 1;
\tsetp.ne.s64 \t%p5, %rd39, 0;
\t@%p5 bra \t$L__BB0_3;
$L__BB0_5:
\tfma.rn.f32 \t%f1, %f1, %f57, %f58;   // a comment is no instruction
\t@%p2 fma.rn.f32 \t%f2, %f2, %f57, %f58;
\tfma.rn.f32 \t%f3, %f3, %f57, %f58;
\tfma.rn.f64 \t%fd3, %fd3, %fd57, %fd58;
\tfma.rn.ftz.f32 \t%f4, %f4, %f57, %f58;
\tmul.f32 \t%f5, %f5, %f57;

\tadd.s64 \t%rd20, %rd20, 1;
\tsetp.lt.s64 \t%p2, %rd20, %rd7;
\t@%p2 bra \t$L__BB0_5;
$L__BB0_7:
\tfma.rn.f32 \t%f9, %f9, %f57, %f58;
$L__BB0_8:
\tfma.rn.f32 \t%f9, %f9, %f57, %f58;
\tfma.rn.f32 \t%f9, %f9, %f57, %f58;
\tfma.rn.f32 \t%f9, %f9, %f57, %f58;
\tfma.rn.f32 \t%f9, %f9, %f57, %f58;
\tfma.rn.f32 \t%f9, %f9, %f57, %f58;
\t@%p3 bra \t$L__BB0_8;
\t@%p4 bra \t$L__BB0_7;
}
"""


def test_fma_share_counts_the_hottest_innermost_loop_s_instructions():
    """Of the innermost loops (BB0_7 holds BB0_8, so it is not one), the one with the most
    FMAs (BB0_8's 5 beat BB0_5's 4 and the remainder loop's 2); labels, `.pragma`, braces,
    blank lines and comments are not instructions, a predicated fma is an fma, `fma.rn.ftz`
    and `mul` are not `fma.rn.f32` / `fma.rn.f64`."""
    from bwprof.gpu.ptx import LoopFma, fma_share, innermost_loops

    assert [(body.start, body.stop) for body in innermost_loops(FMA_LOOPS_PTX)] == [
        (3, 10), (10, 21), (23, 30)]
    assert fma_share(FMA_LOOPS_PTX) == LoopFma(5, 6, "f32")
    without_inner = FMA_LOOPS_PTX.replace("\t@%p3 bra \t$L__BB0_8;\n", "")
    assert fma_share(without_inner) == LoopFma(6, 7, "f32")  # BB0_7 is innermost now
    only_5 = "\n".join(FMA_LOOPS_PTX.splitlines()[9:21])
    found = fma_share(only_5)
    assert found == LoopFma(4, 9, "f32+f64")
    assert found.share == pytest.approx(4 / 9)
    assert fma_share(FMA_LOOPS_PTX.replace("fma.rn", "mul.rn")) is None
    assert fma_share("\tfma.rn.f32 \t%f1, %f1, %f2, %f3;") is None  # no loop


def test_the_report_shows_an_fma_kernel_s_loop_share():
    from bwprof.gpu.ptx import LoopFma

    line = report_lines([KernelPtx("fma_fp32", ok=True, target="sm_90",
                                   loop_fma=LoopFma(256, 259, "f32"))], (9, 0))[0]
    assert line.endswith("(loop 98.8% fma.rn.f32: 256 of 259 instructions)"), line
    plain = report_lines([KernelPtx("copy", ok=True, target="sm_90")], (9, 0))[0]
    assert "fma" not in plain


def test_each_fma_kernel_runs_its_chains_on_its_own_types_units(sm90_ptx):
    """fma_fp32 and fma_fp64 come from one factory: fp32's chains must stay fma.rn.f32 (the
    CUDA-core fp32 ceiling), fp64's fma.rn.f64, every chain of them."""
    import re

    found = {name: {kind: len(re.findall(rf"\bfma\.rn\.{kind}\b", sm90_ptx[name]))
                    for kind in ("f32", "f64")} for name in ("fma_fp32", "fma_fp64")}
    assert found["fma_fp32"]["f64"] == 0 and found["fma_fp32"]["f32"] >= 8, found
    assert found["fma_fp64"]["f32"] == 0 and found["fma_fp64"]["f64"] >= 8, found


# -- every index is 64-bit ---------------------------------------------------------------------


def test_no_kernel_makes_a_global_address_from_a_32_bit_index(sm90_ptx):
    """sm_90 PTX of every kernel: the index arithmetic that reaches a global load's, store's
    or atomic's address is 64-bit (cuda.grid(1) is `mul.wide.s32` of the block registers plus
    the thread's, the grid stride 64-bit, `i * stride` 64-bit), so no kernel wraps at 2^31 or
    2^32 elements (an H200's 141 GB is 2^34 float64)."""
    from bwprof.gpu.kernels import KERNELS
    from bwprof.gpu.ptx import narrow_index_arithmetic

    for name in KERNELS:
        assert narrow_index_arithmetic(sm90_ptx[name]) == [], name


def test_the_bandwidth_kernels_index_with_the_wide_grid(sm90_ptx):
    """The index every bandwidth kernel starts from is cuda.grid(1) made in 64 bits: the block
    offset a widening multiply (`mul.wide`) of the block registers, never a 32-bit `mad.lo`."""
    import re

    for name in ("init", "copy", "scale", "add", "triad", "dot", "compute", "load", "sm_copy"):
        ptx = sm90_ptx[name]
        assert re.search(r"mul\.wide\.[su]32\s+%rd\d+, %r\d+, %r\d+;", ptx), name
        assert not re.search(r"\bmad\.lo\.[su]32\b", ptx), name


@pytest.mark.parametrize("control", CONTROLS)
def test_the_64_bit_check_catches_a_32_bit_index_as_numba_compiles_it(sm90_ptx, control):
    """The controls hold their index in 32 bits (the classic `blockIdx.x * blockDim.x +
    threadIdx.x` in uint32, an int32 grid-stride loop, an index cut to int32): the check
    names the instructions, and compiling such a kernel fails `bwprof kernels`."""
    from bwprof.gpu.ptx import narrow_index_arithmetic, narrow_index_error

    found = narrow_index_arithmetic(sm90_ptx[control])
    assert found, control
    assert all(re.search(r"\.[su]32\b|\.b64", line) for line in found), found
    error = narrow_index_error(found)
    assert error is not None and error.startswith("32-bit index arithmetic reaches a global "
                                                  "address (")
    assert error.endswith("it wraps past 2^31 elements")


NARROW_PTX = """\
.reg .pred \t%p<3>;
.reg .b32 \t%r<12>;
.reg .b64 \t%rd<20>;
\tmov.u32 \t%r1, %ctaid.x;
\tmov.u32 \t%r2, %ntid.x;
\tmov.u32 \t%r3, %tid.x;
\tmad.lo.s32 \t%r4, %r1, %r2, %r3;
\tmul.wide.s32 \t%rd1, %r2, %r1;
\tcvt.s64.s32 \t%rd2, %r3;
\tadd.s64 \t%rd3, %rd1, %rd2;
\tshl.b64 \t%rd4, %rd3, 3;
\tadd.s64 \t%rd5, %rd9, %rd4;
\tld.global.f64 \t%fd1, [%rd5];
\tcvt.u64.u32 \t%rd6, %r4;
\tshl.b64 \t%rd7, %rd6, 3;
\tadd.s64 \t%rd8, %rd9, %rd7;
\tst.global.f64 \t[%rd8], %fd1;
\tadd.s32 \t%r5, %r3, 1;
\tsetp.lt.s32 \t%p1, %r5, 7;
\tshl.b32 \t%r6, %r3, 3;
\tst.shared.f64 \t[%r6], %fd1;
\tld.global.u64 \t%rd10, [%rd5+8];
\tshl.b64 \t%rd11, %rd10, 3;
\tadd.s64 \t%rd12, %rd9, %rd11;
\tld.global.u64 \t%rd13, [%rd12];
\tcvt.s64.s32 \t%rd14, %rd3;
\tand.b64 \t%rd15, %rd3, 4294967295;
\tadd.s64 \t%rd16, %rd14, %rd15;
\t@%p1 atom.global.add.u64 \t%rd17, [%rd16], 1;
"""


def test_the_64_bit_check_follows_only_what_reaches_a_global_address():
    """The load's index is the wide grid (fine); the store's comes from a 32-bit `mad.lo`
    (caught); a 32-bit counter that feeds a comparison and a shared-memory address is not an
    index into global memory; a loaded value used as an address (a chase) is no arithmetic;
    the atomic's address holds a 64-bit register cut to 32 bits twice (both caught)."""
    from bwprof.gpu.ptx import narrow_index_arithmetic

    found = [" ".join(line.split()) for line in narrow_index_arithmetic(NARROW_PTX)]
    assert found == ["mad.lo.s32 %r4, %r1, %r2, %r3;", "cvt.s64.s32 %rd14, %rd3;",
                     "and.b64 %rd15, %rd3, 4294967295;"]


def test_a_kernel_with_a_32_bit_index_fails_the_report():
    from bwprof.gpu.ptx import narrow_index_error

    error = narrow_index_error(["mad.lo.s32 \t%r4, %r1, %r2, %r3;"])
    lines = report_lines([KernelPtx("copy", ok=False, error=error, target="sm_90")], (9, 0))
    assert lines[0].split()[:2] == ["copy", "FAILED"]
    assert "first `mad.lo.s32 %r4, %r1, %r2, %r3`" in lines[0]
    assert lines[-1].endswith("0 compiled, 1 failed")
    assert narrow_index_error([]) is None
