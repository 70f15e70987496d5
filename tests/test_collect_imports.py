"""Collecting the suite loads neither torch nor the openai client: every test worker collects every
test module, so a module-level import of either costs each worker a few seconds of CPU before its
first test (collection took 6.4 CPU-s a process with them, 3.8 without).  Tests that need them
import them where they run.

Read from the sources (no import): a test module's top-level imports, followed through Specdeck's own
modules' top-level imports, must not reach a heavy library.  An import inside a function, or under
``if TYPE_CHECKING:``, is not followed."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "openai", "safetensors", "transformers", "ray")
OWN = ("backend", "state", "specdeck_types", "ui", "tests")


def _top_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
                names.extend(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)

    visit(tree.body)
    return names


def _source(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


_chains: dict[str, tuple[str, ...] | None] = {}


def _reaches_heavy(module: str) -> tuple[str, ...] | None:
    """The import chain from ``module`` to a heavy library, or None (a module whose chain is being
    followed counts as None meanwhile: an import circle reaches nothing new)."""
    if module.split(".")[0] in HEAVY:
        return (module,)
    if module.split(".")[0] not in OWN:
        return None
    if module in _chains:
        return _chains[module]
    _chains[module] = None
    path = _source(module)
    if path is None:
        return None
    parts = module.split(".")
    parents = [".".join(parts[:k]) for k in range(1, len(parts))]  # importing a.b.c runs a and a.b first
    for name in parents + _top_level_imports(path):
        chain = _reaches_heavy(name)
        if chain:
            _chains[module] = (module, *chain)
            break
    return _chains[module]


def test_no_test_module_loads_a_heavy_library_when_collected():
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for name in _top_level_imports(path):
            chain = _reaches_heavy(name)
            if chain:
                found.append(f"{path.relative_to(REPO)}: {' -> '.join(chain)}")
                break
    assert not found, "import these inside the tests that use them:\n" + "\n".join(found)


def test_the_check_follows_specdecks_own_modules_to_torch():
    """The check above can fail: the tiny trainer's tokenizer imports torch at its top."""
    assert _reaches_heavy("backend.flows.tiny.tokenizer")[-1] == "torch"
    assert _reaches_heavy("backend.flows.tiny.target") is not None
    assert _reaches_heavy("backend.train.checkpoints") is None
