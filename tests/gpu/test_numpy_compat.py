"""The NumPy alias numba-cuda 0.30 still names is put back only where NumPy dropped it."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy

from bwprof.gpu.numpy_compat import restore_removed_aliases
from tests.conftest import env_without_cudasim

REPO = Path(__file__).resolve().parents[2]


def fake_numpy(**attributes) -> ModuleType:
    module = ModuleType("numpy")
    module.__version__ = "2.5.2"
    for name, value in attributes.items():
        setattr(module, name, value)
    return module


def test_a_dropped_alias_is_restored_as_the_function_it_named(caplog):
    module = fake_numpy(vstack=numpy.vstack)
    with caplog.at_level(logging.INFO, logger="bwprof.cuda"):
        assert restore_removed_aliases(module) == ["row_stack"]
    assert module.row_stack is numpy.vstack
    assert "NumPy 2.5.2 lacks row_stack" in caplog.text


def test_an_alias_numpy_still_has_is_left_alone(caplog):
    own = object()
    module = fake_numpy(vstack=numpy.vstack, row_stack=own)
    with caplog.at_level(logging.INFO, logger="bwprof.cuda"):
        assert restore_removed_aliases(module) == []
    assert module.row_stack is own
    assert caplog.text == ""


COMPILE_WITHOUT_ROW_STACK = """
import numpy
del numpy.row_stack  # as NumPy 2.5 ships it
from numba import cuda
from bwprof.gpu.kernels import KERNELS
spec = KERNELS["copy"]
cuda.compile_ptx(spec.function, spec.signature, cc=(9, 0))
print(numpy.row_stack is numpy.vstack)
"""


def test_kernels_compile_on_a_numpy_without_row_stack():
    """The H200 image's NumPy 2.5 has no row_stack; numba-cuda 0.30 failed every compile on
    it. With the alias gone (this machine's NumPy still has it), importing the kernels must
    leave the compiler working (real numba.cuda in a subprocess: NVVM, no GPU)."""
    done = subprocess.run([sys.executable, "-c", COMPILE_WITHOUT_ROW_STACK], cwd=REPO,
                          env=env_without_cudasim(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True"]
