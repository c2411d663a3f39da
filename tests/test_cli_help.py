"""`--help`: a flag takes no value, so its line shows no type (typer's rich help printed
`<bool>` after every flag and after --help itself)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from bwprof.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "120"}


def _commands() -> list[list[str]]:
    group = typer.main.get_command(app)
    out = [[]]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        out.append([name])
        out += [[name, sub] for sub in getattr(command, "commands", {})]
    return out


def test_run_and_report_help_show_their_flags_without_a_type():
    for command, flags in ((["run"], ("--quiet", "--json", "--dry-run", "--no-plots")),
                           (["report"], ("--json", "--html", "--no-plots", "--rows"))):
        result = runner.invoke(app, [*command, "--help"], env=WIDE)
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output
        for flag in (*flags, "--help"):  # the word after the flag is its help, not a type
            after = re.search(rf"^\W*{re.escape(flag)} +(\S+)", result.output, re.MULTILINE)
            assert after is not None and not after.group(1).startswith("<"), flag
        assert "<int>" in runner.invoke(app, ["run", "--help"], env=WIDE).output  # values keep it


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c) or "bwprof")
def test_no_help_screen_shows_bool(command):
    result = runner.invoke(app, [*command, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output and "--help" in result.output


def test_a_flag_still_takes_no_value():
    result = runner.invoke(app, ["run", "--quiet=yes"], env=WIDE)
    assert result.exit_code == 2 and "does not take a value" in result.output


# Catches: a command's line in `bwprof --help` broken where its docstring's lines break
# ("...(results.csv, timings.csv, system.json," then "summary.csv, plots)."), at any width
@pytest.mark.parametrize("group", [[], ["history"]], ids=["bwprof", "history"])
def test_each_command_summary_is_its_first_paragraph_on_one_line(group):
    import inspect
    import os
    import subprocess
    import sys

    command = typer.main.get_command(app)
    for name in group:
        command = command.commands[name]  # type: ignore[attr-defined]
    shown = subprocess.run(  # a process of its own: the terminal's width as given here
        [sys.executable, "-m", "bwprof", *group, "--help"], capture_output=True, text=True,
        env={**os.environ, "COLUMNS": "400"}, timeout=120, check=True).stdout
    for name, sub in command.commands.items():  # type: ignore[attr-defined]
        doc = inspect.getdoc(sub.callback) if sub.callback is not None else sub.help
        summary = " ".join((doc or "").split("\n\n")[0].split())
        line = next(line for line in shown.splitlines() if f" {name} " in line)
        assert summary and summary in line, (name, line)
