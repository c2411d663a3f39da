"""Functions named by module and name (`bwprof.lazyref`), and the catalogue's use of them:
every function a case declares must exist, since no import checks it until a run calls it."""

from __future__ import annotations

import dataclasses

import pytest

from bwprof.cases import CASES
from bwprof.lazyref import LazyRef, Refs, ref


def test_a_ref_calls_its_function_and_compares_by_name() -> None:
    join = ref("os.path", "join")
    assert join("a", "b") == "a/b"
    assert join == Refs("os.path").join and hash(join) == hash(ref("os.path", "join"))
    assert join != ref("os.path", "split")
    assert "os.path" in repr(join)


def test_a_ref_to_a_missing_name_fails_when_resolved() -> None:
    with pytest.raises(AttributeError):
        ref("os.path", "no_such_function").resolve()


def test_every_function_a_case_declares_exists() -> None:
    refs = [(case.key, field.name, value) for case in CASES
            for field in dataclasses.fields(case)
            if isinstance(value := getattr(case, field.name), LazyRef)]
    assert len(refs) > 3 * 30  # every GPU case names its run and cost; host cases more
    for key, name, value in refs:
        assert callable(value.resolve()), f"{key}.{name}: {value!r}"
