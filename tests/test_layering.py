"""The house's layers, read from the code's own imports.

- ``backend/`` and ``state/`` are plain Python: none of their modules imports streamlit.
- ``backend/`` never imports ``ui``, ``app_pages`` or ``app``, nor ``backend.cli`` (the command line sits on
  top of the domains: only ``backend/cli`` itself, and ``backend/runtime.py``, the dashboard's
  composition root, may import it).
- ``state/`` imports nothing from ``backend``, ``ui``, ``app_pages`` or ``app`` (the value types both
  use live in ``specdeck_types/``).
- ``specdeck_types/`` imports nothing of the project but itself.
- The domains (``backend/{sglang, regen, bench, train, telemetry, auth}``) stand side by side: none
  imports another, nor ``backend.flows`` (what crosses domains lives there, above them).
- The foundation below them (the supervisor's process API, the simulator, the workspace file reader,
  the small shared readers and writers: ``FOUNDATION``) imports no domain and no flow.
- ``backend/flows`` imports neither the command line nor the dashboard's composition root.
- No modules of the project import each other in a circle.

Every import counts, at the top of a module or inside a function (an import inside a function
still ties the two modules).  An import under ``if TYPE_CHECKING:`` never runs, so it makes no
circle, but it names another module's type all the same: the layer rules above count it too (a
domain that names another domain's class for its type hints depends on that domain).  An
import names one module: ``from a.b import c`` names ``a.b.c`` where that is a module, else
``a.b``; ``import a.b.c`` names the longest of ``a.b.c``, ``a.b``, ``a`` that is a module (the
packages it passes through are not counted, so a package's ``__init__`` that hands names on makes
no circle).  ``importlib.import_module`` with a literal name counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("backend", "state")
PROJECT = ("app.py", "app_pages", "backend", "perf", "scripts", "specdeck_types", "state", "ui")

# Circles known and not yet taken apart; a circle found must lie inside one of these.
ALLOWED_CIRCLES: tuple[frozenset[str], ...] = ()
# state/ writes its database and folders with the same private modes as everything else Specdeck
# writes; backend/filemodes.py is standard library only (the supervisor's wrapper runs it alone).
STATE_MAY_IMPORT = frozenset({"backend.filemodes"})
DOMAINS = ("sglang", "regen", "bench", "train", "telemetry", "auth", "alerts")
FOUNDATION = ("backend.supervisor", "backend.sim", "backend.demo", "backend.workspace", "backend.filemodes",
              "backend.diskspace", "backend.readcap", "backend.validation", "backend.logview", "backend.logprefix",
              "backend.modelinfo", "backend.pyprobe", "backend.tomllines", "backend.wsmodels")
# May import backend.cli: the command line itself, and the dashboard's composition root.
CLI_USERS = ("backend.cli", "backend.runtime", "backend.__main__")


# -- streamlit --------------------------------------------------------------------------------------

def streamlit_imports(source: str, filename: str = "<string>") -> list[int]:
    """Line numbers of every import of streamlit (or a submodule) in ``source``."""
    lines = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            if any(a.name == "streamlit" or a.name.startswith("streamlit.") for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 0 and (mod == "streamlit" or mod.startswith("streamlit.")):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            # importlib.import_module("streamlit") / __import__("streamlit")
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] == "streamlit":
                    lines.append(node.lineno)
    return lines


def layer_files() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (REPO / layer).rglob("*.py"))


def test_layers_have_python_files():
    names = {p.relative_to(REPO).parts[0] for p in layer_files()}
    assert names == set(LAYERS)


@pytest.mark.parametrize("path", layer_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_streamlit_import(path: Path):
    found = streamlit_imports(path.read_text(encoding="utf-8"), str(path))
    assert not found, f"{path.relative_to(REPO)} imports streamlit at line(s) {found}; backend/ and state/ must not"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import streamlit as st", [1]),
        ("import os\nfrom streamlit import session_state", [2]),
        ("import streamlit.components.v1", [1]),
        ("def f():\n    import streamlit\n", [2]),
        ("import importlib\nimportlib.import_module('streamlit')", [2]),
        ("import streamlit_extras", []),
        ("from . import streamlit", []),  # a local module of that name
        ("x = 'import streamlit'", []),
    ],
)
def test_detector(source, expected):
    assert streamlit_imports(source) == expected


# -- the module graph -------------------------------------------------------------------------------

def project_modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of the project (tests are not), by dotted name."""
    out: dict[str, Path] = {}
    for top in PROJECT:
        base = root / top
        paths = [base] if base.is_file() else sorted(base.rglob("*.py")) if base.is_dir() else []
        for p in paths:
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST, *, type_checking: bool = False):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (with ``type_checking``, every node)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports_of(source: str, module: str, modules: set[str], *, package: bool = False,
               type_checking: bool = False) -> set[str]:
    """The project modules that ``source`` (the module named ``module``) imports; with ``type_checking``,
    those it imports under ``if TYPE_CHECKING:`` too."""

    def longest(name: str) -> str | None:
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in modules:
                return ".".join(parts[:n])
        return None

    here = module.split(".") if package else module.split(".")[:-1]
    found: set[str] = set()
    for node in _nodes(ast.parse(source), type_checking=type_checking):
        if isinstance(node, ast.Import):
            found.update(filter(None, (longest(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}" if mod else a.name
                target = sub if sub in modules else longest(mod) if mod else None
                if target:
                    found.add(target)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                target = longest(arg.value)
                if target:
                    found.add(target)
    found.discard(module)
    return found


def import_graph(root: Path = REPO, *, type_checking: bool = False) -> dict[str, set[str]]:
    """Each project module's imports; with ``type_checking``, those under ``if TYPE_CHECKING:`` too."""
    mods = project_modules(root)
    names = set(mods)
    return {m: imports_of(p.read_text(encoding="utf-8"), m, names, package=p.name == "__init__.py",
                          type_checking=type_checking)
            for m, p in mods.items()}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    scc = set()
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        scc.add(m)
                        if m == node:
                            break
                    if len(scc) > 1:
                        found.append(frozenset(scc))
    return found


def _under(module: str, *tops: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in tops)


def domain_of(module: str) -> str | None:
    """``backend.sglang.config`` -> ``sglang``; None for a module in no domain."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "backend" and parts[1] in DOMAINS else None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import that crosses a layer the wrong way, as ``importer -> imported: why``."""
    out = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            if _under(m, "backend"):
                if _under(t, "ui", "app_pages", "app"):
                    out.append(f"{m} -> {t}: backend/ never imports the dashboard")
                elif _under(t, "backend.cli") and not _under(m, *CLI_USERS):
                    out.append(f"{m} -> {t}: only the command line (and backend/runtime.py) imports backend.cli")
                elif domain_of(m) and domain_of(t) and domain_of(m) != domain_of(t):
                    out.append(f"{m} -> {t}: a domain never imports another (what crosses them is a flow)")
                elif domain_of(m) and _under(t, "backend.flows"):
                    out.append(f"{m} -> {t}: a domain never imports a flow")
                elif _under(m, *FOUNDATION) and (domain_of(t) or _under(t, "backend.flows", "backend.runtime")):
                    out.append(f"{m} -> {t}: the foundation imports no domain, flow or composition root")
                elif _under(m, "backend.flows") and _under(t, "backend.runtime"):
                    out.append(f"{m} -> {t}: a flow never imports the dashboard's composition root")
            elif _under(m, "state"):
                if _under(t, "backend", "ui", "app_pages", "app") and t not in STATE_MAY_IMPORT:
                    out.append(f"{m} -> {t}: state/ imports nothing from backend/, ui/ or app_pages/")
            elif _under(m, "specdeck_types"):
                if not _under(t, "specdeck_types"):
                    out.append(f"{m} -> {t}: specdeck_types/ imports nothing of the project")
    return out


def unexpected_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    return [sorted(c) for c in circles(graph) if not any(c <= allowed for allowed in ALLOWED_CIRCLES)]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_is_read(graph):
    assert {"backend.cli.bench", "state.processes", "specdeck_types.process", "ui.auth", "app"} <= set(graph)
    assert "backend.flows.bench_job" in graph["backend.cli.bench"]


@pytest.fixture(scope="module")
def typed_graph() -> dict[str, set[str]]:
    return import_graph(type_checking=True)


def test_layers(graph):
    assert layer_violations(graph) == []


def test_layers_with_the_imports_for_type_hints(typed_graph, graph):
    """An import under ``if TYPE_CHECKING:`` crosses no layer either (it names the other side's type)."""
    assert all(graph[m] <= typed_graph[m] for m in graph)
    assert layer_violations(typed_graph) == []


def test_every_domain_and_the_foundation_are_there(graph):
    """The rules name real packages: a renamed domain or foundation module must be renamed here too."""
    for d in DOMAINS:
        assert f"backend.{d}" in graph, f"backend/{d} is gone; update DOMAINS"
    for f in FOUNDATION:
        assert f in graph, f"{f} is gone; update FOUNDATION"
    assert any(_under(m, "backend.flows") for m in graph)


def test_no_import_circle(graph):
    found = unexpected_circles(graph)
    assert not found, "modules that import each other in a circle: " + "; ".join(" <-> ".join(c) for c in found)


# -- the detectors on planted imports -----------------------------------------------------------------

MODS = {"backend", "backend.cli", "backend.cli.bench", "backend.bench", "backend.bench.job", "backend.flows",
        "backend.flows.bench_job", "backend.runtime",
        "backend.filemodes", "state", "state.store", "specdeck_types", "specdeck_types.bench", "ui", "ui.auth",
        "ui.context", "app_pages.gpus", "app"}


@pytest.mark.parametrize(
    "module, source, expected",
    [
        ("backend.flows.bench_job", "from backend.cli.bench import describe", {"backend.cli.bench"}),
        ("backend.flows.bench_job", "def f():\n    from backend.cli import bench\n", {"backend.cli.bench"}),
        ("backend.flows.bench_job", "import backend.cli.bench.nothing", {"backend.cli.bench"}),
        ("backend.flows.bench_job", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ui.auth import x\n",
         set()),
        ("backend.flows.bench_job", "import typing\nif typing.TYPE_CHECKING:\n    import ui.auth\nelse:\n    import state\n",
         {"state"}),
        ("backend.flows.bench_job", "from . import runner", {"backend.flows"}),
        ("backend.flows.bench_job", "from .. import filemodes", {"backend.filemodes"}),
        ("backend.bench", "from .job import x", {"backend.bench.job"}),
        ("backend.flows.bench_job", "import importlib\nimportlib.import_module('ui.context')", {"ui.context"}),
        ("backend.flows.bench_job", "import os, json\nfrom pathlib import Path", set()),
    ],
)
def test_imports_of(module, source, expected):
    assert imports_of(source, module, MODS, package=module == "backend.bench") == expected


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"backend.flows.bench_job": {"backend.cli.bench"}}, ["backend.flows.bench_job -> backend.cli.bench"]),
        ({"backend.flows.bench_job": {"ui.auth"}}, ["backend.flows.bench_job -> ui.auth"]),
        ({"backend.cli.bench": {"app_pages.gpus"}}, ["backend.cli.bench -> app_pages.gpus"]),
        ({"state.store": {"backend.flows.bench_job"}}, ["state.store -> backend.flows.bench_job"]),
        ({"state.store": {"ui.context"}}, ["state.store -> ui.context"]),
        ({"specdeck_types.bench": {"state.store"}}, ["specdeck_types.bench -> state.store"]),
        ({"specdeck_types.bench": {"backend.filemodes"}}, ["specdeck_types.bench -> backend.filemodes"]),
        ({"backend.train.checkpoints": {"backend.sglang.preflight"}},
         ["backend.train.checkpoints -> backend.sglang.preflight"]),
        ({"backend.bench": {"backend.regen.output"}}, ["backend.bench -> backend.regen.output"]),
        ({"backend.sglang.fleet": {"backend.flows.relaunch"}}, ["backend.sglang.fleet -> backend.flows.relaunch"]),
        ({"backend.workspace": {"backend.regen.catalog"}}, ["backend.workspace -> backend.regen.catalog"]),
        ({"backend.supervisor.loop": {"backend.flows.demo"}}, ["backend.supervisor.loop -> backend.flows.demo"]),
        ({"backend.sim.server": {"backend.sglang.config"}}, ["backend.sim.server -> backend.sglang.config"]),
        ({"backend.flows.sweep": {"backend.runtime"}}, ["backend.flows.sweep -> backend.runtime"]),
        # allowed
        ({"backend.flows.deploy": {"backend.bench.breakeven", "backend.sglang.config", "backend.workspace"}}, []),
        ({"backend.train.runs": {"backend.workspace", "backend.supervisor.logtail", "backend.train.config"}}, []),
        ({"backend.sglang.client": {"specdeck_types.server_info"}, "backend.bench.intake": {"state.bench"}}, []),
        ({"backend.cli": {"backend.cli.bench"}, "backend.runtime": {"backend.cli"}}, []),
        ({"state.store": {"backend.filemodes", "specdeck_types.bench"}}, []),
        ({"specdeck_types.bench": {"specdeck_types"}, "ui.auth": {"backend.runtime", "state"}}, []),
    ],
)
def test_layer_rules_catch_planted_imports(graph, expected):
    assert [v.split(":")[0] for v in layer_violations(graph)] == expected


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"ui.auth": {"ui.context"}, "ui.context": {"ui.auth"}}, [["ui.auth", "ui.context"]]),
        ({"ui.train.form": {"ui.train.control"}, "ui.train.control": {"ui.train.form"}},
         [["ui.train.control", "ui.train.form"]]),
        ({"ui.train.form": {"ui.regen.live"}, "ui.regen.live": {"ui.train.form"}}, [["ui.regen.live", "ui.train.form"]]),
    ],
)
def test_circle_rule_catches_planted_circles(graph, expected):
    assert unexpected_circles(graph) == expected


@pytest.mark.parametrize(
    "module, source, expected",
    [
        # a domain that names another domain's class for its type hints
        ("backend.sglang.livefigures",
         "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from backend.bench.baseline import Baseline\n",
         ["backend.sglang.livefigures -> backend.bench.baseline: a domain never imports another"]),
        ("backend.regen.job", "import typing\nif typing.TYPE_CHECKING:\n    import backend.flows.relaunch\n",
         ["backend.regen.job -> backend.flows.relaunch: a domain never imports a flow"]),
        ("state.store", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from backend.sglang.config import S\n",
         ["state.store -> backend.sglang.config: state/ imports nothing from backend/, ui/ or app_pages/"]),
        # inside the domain, or on the foundation, a type-only import is allowed as any other
        ("backend.regen.job", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from backend.regen.catalog import M\n"
         "    from backend.workspace import Workspace\n", []),
    ],
)
def test_layer_rules_count_planted_imports_for_type_hints(module, source, expected):
    mods = {"backend.sglang.livefigures", "backend.bench.baseline", "backend.regen.job", "backend.regen.catalog",
            "backend.flows.relaunch", "backend.workspace", "backend.sglang.config", "state.store"}
    assert layer_violations({module: imports_of(source, module, mods)}) == []  # unseen without type_checking
    typed = {module: imports_of(source, module, mods, type_checking=True)}
    assert [v.split(" (")[0] for v in layer_violations(typed)] == expected


MAX_LINES = 600
SIZED = ("app.py", "backend", "state", "specdeck_types", "ui", "app_pages")


def _oversized(root: Path, limit: int = MAX_LINES) -> list[str]:
    paths = [root / s for s in SIZED]
    files = [p for base in paths for p in ([base] if base.is_file() else sorted(base.rglob("*.py")) if base.is_dir()
                                            else [])]
    return [f"{p.relative_to(root)}: {n} lines" for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit]


def test_no_module_is_over_600_lines():
    """Small modules: one that grows past 600 lines is split where its seam is."""
    assert _oversized(REPO) == []


def test_the_size_rule_catches_a_long_module(tmp_path):
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "ui" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert _oversized(tmp_path) == [f"ui/long.py: {MAX_LINES + 1} lines"]
