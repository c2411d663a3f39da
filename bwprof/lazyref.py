"""A function named by its module and name, imported when first called.

The case catalogue declares, with each case, the functions that expand, cost and run it.
Holding them by name keeps the catalogue pure data to import: reading a saved run folder
(which asks the catalogue what a case is) never loads the measuring code, and the measuring
code is loaded, once, when a run first calls one of its functions.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyRef:
    """Calls `module.name`, importing `module` on the first call (`ref` builds one)."""

    __slots__ = ("_target", "module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name
        self._target: Any = None

    def resolve(self) -> Any:
        """The function itself (its module imported now, where not already)."""
        if self._target is None:
            self._target = getattr(importlib.import_module(self.module), self.name)
        return self._target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyRef):
            return (self.module, self.name) == (other.module, other.name)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.module, self.name))

    def __repr__(self) -> str:
        return f"ref({self.module!r}, {self.name!r})"


class Refs:
    """The functions of one module, each a `ref`: `Refs("bwprof.gpu.transfers").one_way`
    names `one_way` without importing the module. Only for functions: a constant read
    through it would be a LazyRef, not its value."""

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return ref(self._module, name)


def ref(module: str, name: str) -> Any:
    """`module.name`, imported when first called. Typed Any so that a declaration's field
    (a `Run`, an `Expand`, a `Costs`) takes it; `resolve` checks the name exists."""
    return LazyRef(module, name)
