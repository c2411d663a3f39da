"""The layers of DESIGN.md ("Layers") held against the code: reading a saved run folder loads
no measuring code and no GPU library, bwprof's modules import each other without a circle,
and no module imports a layer above its own except the exceptions listed here."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

DATA = Path(__file__).parent / "data"

GPU_LIBRARIES = ("numba", "cupy", "pynvml", "llvmlite")
CATALOGUE_DECLARATIONS = {"bwprof.gpu", "bwprof.gpu.cases", "bwprof.gpu.layout",
                          "bwprof.gpu.kernel_params", "bwprof.host", "bwprof.host.cases"}
"""What of bwprof/gpu and bwprof/host the catalogue loads: the case tables (their run
functions named, not imported) and the plain data they declare with."""
MEASURING = ("bwprof.gpu", "bwprof.host", "bwprof.telemetry", "bwprof.runner",
             "bwprof.executor", "bwprof.estimate", "bwprof.budget", "bwprof.chain")

READ_ONLY_COMMANDS = textwrap.dedent("""
    import contextlib, io, json, sys
    from bwprof.cli import main

    data, out = sys.argv[1], sys.argv[2]
    commands = [
        ["report", f"{data}/h200-quick", "--no-plots", "--out", f"{out}/h200"],
        ["report", f"{data}/host-ddr", "--no-plots", "--out", f"{out}/host"],
        ["accept", f"{data}/h200-quick", f"{data}/host-ddr"],
        ["compare", f"{data}/h200-quick", f"{data}/host-ddr"],
        ["history", "add", f"{data}/h200-quick", f"{data}/host-ddr", "--store", f"{out}/store"],
        ["trend", "--store", f"{out}/store", "--no-plots"],
    ]
    codes = {}
    for argv in commands:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            codes[" ".join(argv[:2])] = main(argv)
    print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
""")


def _measuring(name: str) -> bool:
    if name.split(".")[0] in GPU_LIBRARIES:
        return True
    if name in CATALOGUE_DECLARATIONS:
        return False
    return any(name == prefix or name.startswith(prefix + ".") for prefix in MEASURING)


def test_measuring_names_what_the_old_catalogue_loaded() -> None:
    # The check itself: what `bwprof.cases` loaded before its run functions were named lazily.
    assert _measuring("bwprof.gpu.transfers") and _measuring("bwprof.host.latency")
    assert _measuring("numba.core") and _measuring("pynvml")
    assert not _measuring("bwprof.gpu.cases") and not _measuring("bwprof.analysis.summary")


def test_reading_a_saved_folder_loads_no_measuring_code(tmp_path: Path) -> None:
    """`report`, `accept`, `compare`, `history add` and `trend` on saved folders, in a fresh
    interpreter: no numba, CuPy or NVML, and no GPU or host measuring module, is imported."""
    done = subprocess.run([sys.executable, "-c", READ_ONLY_COMMANDS, str(DATA), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    # Every command ran (accept on a CPU-only folder beside an H200 one may judge FAIL: 1).
    assert set(result["codes"].values()) <= {0, 1}, result["codes"]
    assert result["codes"]["report " + str(DATA / "h200-quick")] == 0
    assert "bwprof.store.runfolder" in result["modules"]  # the folders were read here
    loaded = [name for name in result["modules"] if _measuring(name)]
    assert loaded == [], f"reading a saved folder imported {loaded}"


# -- the import graph -----------------------------------------------------------------------

PACKAGE = Path(__file__).parent.parent / "bwprof"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _imports(tree: ast.Module, module: str, is_package: bool,
             top_level: bool) -> list[tuple[str, list[str]]]:
    """(module imported from, names) of each import statement: those run when the module is
    imported (`top_level`), or every one in it; never those under `if TYPE_CHECKING:`."""
    found: list[tuple[str, list[str]]] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking(node.test):
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                found.extend((alias.name, []) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[:len(package) - node.level + 1]
                    base = ".".join([*package, *([node.module] if node.module else [])])
                found.append((base, [alias.name for alias in node.names]))
            elif top_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                 ast.Lambda)):
                continue
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    for inner in getattr(node, field, None) or ():
                        if isinstance(inner, ast.stmt):
                            visit([inner])
                        elif isinstance(inner, (ast.ExceptHandler, ast.match_case)):
                            visit(inner.body)

    visit(tree.body)
    return found


@functools.cache
def import_graph(top_level: bool) -> dict[str, set[str]]:
    """Each bwprof module and the bwprof modules it imports (`from bwprof import costs`
    imports bwprof.costs, not the package's `__init__`)."""
    paths = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps: set[str] = set()
        for base, names in _imports(tree, name, path.name == "__init__.py", top_level):
            submodules = {f"{base}.{n}" for n in names} & paths.keys()
            if submodules:
                deps |= submodules
            elif base in paths:
                deps.add(base)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected set of two or more modules, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                connect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def test_cycles_finds_a_circle_and_nothing_else() -> None:
    graph = {"plan": {"cases"}, "cases": {"gpu.cases"}, "gpu.cases": {"plan", "units"},
             "units": set(), "verdict": {"report"}, "report": {"verdict"}}
    assert cycles(graph) == [["cases", "gpu.cases", "plan"], ["report", "verdict"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_what_a_module_imports_at_its_top() -> None:
    graph = import_graph(top_level=True)
    assert "bwprof.cases" in graph["bwprof.plan"]
    assert "bwprof.costs" in graph["bwprof.gpu.cost"]  # from bwprof import costs
    assert "bwprof.plan" not in graph["bwprof.gpu.cases"]  # under TYPE_CHECKING
    assert "bwprof.cases" not in graph["bwprof.store.runfolder"]  # inside a function
    assert "bwprof.cases" in import_graph(top_level=False)["bwprof.store.runfolder"]


def test_no_import_circles() -> None:
    """No module imports, at its top, one that imports it back (however far round)."""
    assert cycles(import_graph(top_level=True)) == []
