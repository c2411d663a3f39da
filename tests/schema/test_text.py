"""JSON output's one sanitiser (`schema.meta.to_json`), as `json_ready` gives it to the
--json outputs: strings printable, non-finite floats null, everything encodable."""

from __future__ import annotations

import json
import math

import numpy as np

from bwprof.schema.meta import MachineIdentity, to_json
from bwprof.schema.text import json_ready, printable


def test_json_ready_is_to_json_with_printable_strings():
    value = {"a\x1b[31m": ["x\x07", 1.5, math.nan, math.inf, None, True, 3, ("t",)]}
    assert json_ready(value) == to_json(value, printable) == {
        printable("a\x1b[31m"): [printable("x\x07"), 1.5, None, None, None, True, 3, ["t"]]}
    assert to_json(value) == {"a\x1b[31m": ["x\x07", 1.5, None, None, None, True, 3, ["t"]]}


# Catches: a --json sanitiser of its own that passes NumPy scalars, sets and records
# through, so json.dumps raises on them (the three did one job three ways)
def test_json_ready_encodes_what_system_json_encodes():
    identity = MachineIdentity(box="ab\x1b", box_source="machine_id", gpu_uuids=("u",))
    value = {"n": np.int64(7), "f": np.float64("nan"), "b": np.bool_(True), "s": {"b", "a"},
             "id": identity}
    ready = json_ready(value)
    assert json.loads(json.dumps(ready, allow_nan=False)) == {
        "n": 7, "f": None, "b": True, "s": ["a", "b"],
        "id": {**identity.as_dict(), "box": printable("ab\x1b")}}
