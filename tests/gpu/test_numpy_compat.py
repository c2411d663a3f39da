"""The NumPy alias numba-cuda 0.30 still names is put back only where NumPy dropped it."""

from __future__ import annotations

import logging
from types import ModuleType

import numpy

from bwprof.gpu import kernels  # noqa: F401  (importing the kernels applies the fix)
from bwprof.gpu.numpy_compat import restore_removed_aliases


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


def test_importing_the_kernels_leaves_numba_cuda_an_alias_to_compile_against():
    assert callable(numpy.row_stack)
