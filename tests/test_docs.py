"""The README is the front door (issue 21): the quick start near the top, the whole of it
short, and every link from it and from docs/ landing on a file and heading that exist, so a
section moved between files cannot leave a dead anchor behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped,
    spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(title) for title in re.findall(r"^#+ (.+)$", text, re.M)}


def test_the_quick_start_is_in_the_first_40_lines_and_the_readme_under_300():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300
    for name in ("run", "test"):  # what .ci/run extracts with awk
        marker = lines.index(f"<!-- quickstart:{name} -->")
        assert lines[marker + 1].startswith("```") and lines[marker + 3] == "```"
        assert marker + 3 < 40, name


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_lands_on_a_file_and_heading(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: {target}"


def exit_code_table(page: Path) -> set[int]:
    """The codes in the first column of a page's exit-code table (rows like "| `2` | ...")."""
    return {int(code) for code in re.findall(r"^\| `(\d+)` \|", page.read_text(encoding="utf-8"),
                                             re.M)}


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "command-line.md"],
                         ids=lambda page: page.relative_to(ROOT).as_posix())
def test_the_exit_code_tables_list_exactly_the_codes_bwprof_uses(page):
    from bwprof import errors

    defined = {value for name, value in vars(errors).items()
               if name.startswith("EXIT_") and isinstance(value, int)}
    assert exit_code_table(page) == defined


ADDING_A_CASE = ROOT / "docs" / "adding-a-case.md"


def test_adding_a_case_names_only_files_and_names_that_exist():
    """The next issues add cases by following docs/adding-a-case.md: a path or a name it
    points at that moved would send them looking."""
    text = ADDING_A_CASE.read_text(encoding="utf-8")
    for path, name in re.findall(r"`((?:bwprof|tests)/[\w/]+\.py)(?:::(\w+))?", text):
        assert (ROOT / path).is_file(), path
        if name:
            assert re.search(rf"^(?:def |class )?{name}\b", (ROOT / path).read_text(), re.M), \
                f"{path}::{name}"
    for test in re.findall(r"`(test_\w+)`", text):
        assert any(re.search(rf"^def {test}\(", p.read_text(), re.M)
                   for p in (ROOT / "tests").rglob("test_*.py")), test


def test_adding_a_case_example_is_the_real_entry():
    """The doc's example entry is d2d_sm as the table declares it: its function and buffers."""
    from bwprof.gpu import cases

    example = FENCE.findall(ADDING_A_CASE.read_text(encoding="utf-8"))[0]
    assert '_gpu("d2d_sm"' in example
    (entry,) = [c for c in cases.GPU_CASES if c.key == "d2d_sm"]
    module, function = re.search(r"run=(\w+)\.(\w+)", example).groups()
    run = entry.run.resolve()  # the table names its functions, imported when first called
    assert f"{run.__module__}.{run.__name__}" == f"bwprof.gpu.{module}.{function}"
    for expansion in re.findall(r"`(\w+)`", text_between("Reuse one of", "or add one")):
        assert callable(getattr(cases, expansion, None)), expansion


def text_between(start: str, end: str) -> str:
    text = ADDING_A_CASE.read_text(encoding="utf-8")
    return text[text.index(start):text.index(end)]


def _fenced_after(page: Path, heading: str) -> list[str]:
    """The lines of the first fenced block after `heading` in `page`."""
    text = page.read_text(encoding="utf-8")
    block = FENCE.search(text, text.index(heading))
    assert block is not None, heading
    return block.group(0).splitlines()[1:-1]


# Catches: the README's examples of `bwprof report` on the stored H200 run and of `bwprof
# compare` left behind when what they print changes (a figure now the median, not the best;
# a line added or reworded)
@pytest.mark.parametrize(("heading", "args", "code"), [
    ("## Reading a saved run",
     ["report", "tests/data/h200-quick", "--no-plots", "--out", "{tmp}"], 0),
    ("## Comparing runs",
     ["compare", "tests/data/sim-a", "tests/data/sim-b-slower", "--fail-below", "5"], 1),
], ids=["report", "compare"])
def test_the_readmes_examples_are_what_bwprof_prints(tmp_path, monkeypatch, heading, args,
                                                      code):
    from typer.testing import CliRunner

    from bwprof.cli import app

    monkeypatch.chdir(ROOT)  # the folders as the README's reader types them
    result = CliRunner().invoke(app, [arg.format(tmp=tmp_path) for arg in args],
                                env={"COLUMNS": "200"})
    assert result.exit_code == code, result.output
    printed = [line.rstrip() for line in result.output.splitlines()]
    shown = _fenced_after(README, heading)
    kept = [line.rstrip() for line in shown  # trimmed ("..."), or naming the reader's path
            if line.strip() != "..." and ".../" not in line and not line.startswith("wrote ")]
    assert len(kept) > 10
    missing = [line for line in kept if line not in printed]
    assert not missing, missing
    position = 0
    for line in kept:  # in the README's order
        position = printed.index(line, position) + 1


def _visible_options(command: object, name: str = "bwprof") -> dict[str, list[str]]:
    """Every command's options a user sees in its --help, by command."""
    found: dict[str, list[str]] = {}
    for sub_name, sub in getattr(command, "commands", {}).items():
        here = f"{name} {sub_name}"
        found[here] = [option for param in sub.params if not getattr(param, "hidden", False)
                       for option in param.opts if option.startswith("--")
                       and option != "--help"]
        found.update(_visible_options(sub, here))
    return found


# Catches: an option added to a command (report --html, run --all-pairs) but not to the page
# the README sends a reader to for every option
def test_the_command_line_page_names_every_option():
    import typer

    from bwprof.cli import app

    page = (ROOT / "docs" / "command-line.md").read_text(encoding="utf-8")
    missing = {command: [option for option in options
                         if not re.search(re.escape(option) + r"(?![\w-])", page)]
               for command, options in _visible_options(typer.main.get_command(app)).items()}
    assert not {command: options for command, options in missing.items() if options}
