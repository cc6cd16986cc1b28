"""The shape of the whole tree: no import circle at run time anywhere in the
library or the application, no module of the library over 600 lines, and
no engine parameter without its type."""
from __future__ import annotations

import ast
import os
from typing import Dict, List, Set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("twisted_stalk", "twisted_stalk_cli")
MAX_LINES = 600


def _modules() -> Dict[str, str]:
    """Dotted module name -> file, for every module of the packages."""
    found = {}
    for package in PACKAGES:
        for top, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(top, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted[:-len(".__init__")] if name == "__init__.py" else dotted] = path
    return found


def _type_checking_only(tree: ast.AST) -> Set[ast.AST]:
    """The import nodes under ``if TYPE_CHECKING:`` (never run)."""
    skipped: Set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            for inner in node.body:
                skipped.update(ast.walk(inner))
    return skipped


def _run_time_imports(module: str, path: str, modules: Dict[str, str]) -> Set[str]:
    """The modules of the packages that importing (or running) ``module``
    imports, function bodies included; a package's own ancestors left out
    (they are being imported already)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    skipped = _type_checking_only(tree)
    out: Set[str] = set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # importing a.b.c runs a and a.b first
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in modules and not module.startswith(name + ".") and name != module:
                    out.add(name)
    return out


def circles_in(graph: Dict[str, Set[str]]) -> List[str]:
    """The import circles of ``graph`` (module -> modules it imports), one
    per circle found by a depth-first walk (none: the graph has no circle)."""
    done: Set[str] = set()
    path: List[str] = []
    circles: List[str] = []

    def visit(m: str) -> None:
        if m in path:
            circles.append(" -> ".join(path[path.index(m):] + [m]))
            return
        if m in done:
            return
        path.append(m)
        for n in sorted(graph.get(m, ())):
            visit(n)
        path.pop()
        done.add(m)
    for m in sorted(graph):
        visit(m)
    return circles


def test_no_import_circle_at_run_time():
    modules = _modules()
    assert circles_in({m: _run_time_imports(m, p, modules) for m, p in modules.items()}) == []



def test_no_module_of_the_library_is_over_600_lines():
    long = {}
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if module.startswith("twisted_stalk.") and lines > MAX_LINES:
            long[module] = lines
    assert long == {}


def test_every_engine_parameter_says_its_type():
    """A function taking an engine says which (the ``Engine`` seam, or an
    engine class): a reader of ``def put(engine, ...)`` learns nothing of
    what it may call.  ``Any`` says no more than nothing."""
    untyped = []
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs:
                if arg.arg == "engine" or arg.arg.endswith("_engine"):
                    note = ast.unparse(arg.annotation) if arg.annotation else ""
                    if note in ("", "Any", "Optional[Any]", "object"):
                        untyped.append(f"{module}.{node.name}({arg.arg}: {note or '-'})")
    assert untyped == []
