"""What `bwprof report --no-plots` says about a run folder, as text and JSON, with the
folder's path replaced by `RUN`: the oracle `test_report_golden` holds the renderer to, so a
faster report (issue 36) says the same lines and the same JSON bytes as the one it replaced.

    python -m tests.render.report_golden DIR OUT_PREFIX   # capture DIR's expectations
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from rich.console import Console

WIDTH = 120
"""The terminal width of the captured text: wide enough that tables keep their columns."""


def rendered(folder: Path) -> dict[str, str]:
    """`report --no-plots` of `folder` without writing a file: the terminal text (with
    `--rows`), the `--json` document and the `--json --rows` document, as their bytes."""
    from bwprof import saved
    from bwprof.render.jsontext import json_text  # json.dumps(..., indent=2) of JsonRows too

    report = saved.make_run_report(str(folder), plots=False, write=False)
    buffer = io.StringIO()
    console = Console(file=buffer, width=WIDTH, force_terminal=False, color_system=None)
    saved.print_run_report(console, report, show_rows=True, run_dir="RUN", warn=False)
    outputs = {
        "txt": buffer.getvalue(),
        "json": json_text(saved.run_report_json(report, run_dir="RUN", warn=False)),
        "rows.json": json_text(saved.run_report_json(report, show_rows=True, run_dir="RUN",
                                                     warn=False)),
    }
    place = str(Path(folder).resolve())
    return {kind: text.replace(json.dumps(place)[1:-1], "RUN").replace(place, "RUN")
            for kind, text in outputs.items()}


def main(argv: list[str]) -> int:
    folder, prefix = Path(argv[0]), argv[1]
    for kind, text in rendered(folder).items():
        Path(f"{prefix}.{kind}").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
