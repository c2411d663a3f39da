"""The SM copy's grid against what an SM holds: `kernel_params.sm_copy_blocks` assumes
SM_COPY_BLOCKS_PER_SM blocks of SM_COPY_THREADS fit on every SM at once (one_to_all's
kernels share that capacity, so all of them are resident together). Registers decide it:
ptxas compiles the kernel's sm_90 PTX here, without a GPU, and says how many it uses."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bwprof.gpu.kernel_params import (
    SM_COPY_BLOCKS_PER_SM,
    SM_COPY_THREADS,
    sm_copy_blocks,
    sm_copy_resident,
)
from tests.conftest import env_without_cudasim

REPO = Path(__file__).resolve().parents[2]
HOPPER_REGISTERS_PER_SM = 64 * 1024
"""32-bit registers of one Hopper SM (H100/H200: 64 K, as every SM since Kepler)."""
REGISTER_UNIT = 8
"""A thread's registers are allocated in steps of 8 (256 a warp)."""
SM_COPY_PTX = """
import json
from numba import cuda
from bwprof.gpu.kernels import KERNELS
spec = KERNELS["sm_copy"]
ptx, _ = cuda.compile_ptx(spec.function, spec.signature, cc=(9, 0))
print(json.dumps(ptx))
"""


def test_concurrent_copies_share_the_resident_blocks():
    resident = sm_copy_resident(132)
    assert resident == 132 * SM_COPY_BLOCKS_PER_SM
    big = 256 << 20 >> 3  # elements of a 256 MiB copy: more than a full grid needs
    assert sm_copy_blocks(big, 132) == resident
    for grids in range(1, 16):
        assert grids * sm_copy_blocks(big, 132, grids) <= resident, grids
    assert sm_copy_blocks(big, 132, 7) == resident // 7
    assert sm_copy_blocks(1, 132, 7) == 1  # a small copy keeps its own small grid


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas (CUDA toolkit) here")
def test_every_block_of_an_sm_copy_grid_fits_on_a_hopper_sm(tmp_path):
    """The sm_90 kernel's registers, rounded up to the allocation step, for
    SM_COPY_BLOCKS_PER_SM x SM_COPY_THREADS threads must fit in one SM's register file (30
    registers today: 32 allocated, 8 x 256 x 32 = 64 K, exactly full). One register more
    and only 6 blocks fit: a one_to_all grid share sized for 8 would leave a peer waiting."""
    done = subprocess.run([sys.executable, "-c", SM_COPY_PTX], cwd=REPO,
                          env=env_without_cudasim(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    ptx = tmp_path / "sm_copy.ptx"
    ptx.write_text(json.loads(done.stdout))
    info = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(ptx), "-o",
                           str(tmp_path / "sm_copy.cubin")], capture_output=True, text=True,
                          timeout=120, check=True)
    text = info.stdout + info.stderr
    used = re.search(r"Used (\d+) registers", text)
    assert used, text
    allocated = -(-int(used.group(1)) // REGISTER_UNIT) * REGISTER_UNIT
    assert "0 bytes spill stores" in text, text
    assert allocated * SM_COPY_THREADS * SM_COPY_BLOCKS_PER_SM <= HOPPER_REGISTERS_PER_SM, text
