"""The PostgreSQL engine's shape: an engine that owns its parts (stats,
upkeep, take, reserver, listing), each built with the engine and declaring
what it uses of it in a ``...Host`` protocol of its module, so the arrows
between them can be read there and are kept here.

- ``PgEngine`` derives from the shared bases only, no part is a mixin;
- no module of ``twisted_stalk/pg`` reaches into another object's
  ``_private`` members, except the shared bases' that a part declares
  (``core.sessions.SessionRules`` and ``tubes.TubeRegistry`` keep those
  for the engines, as ``_start_waiting`` or ``_now``);
- what a part reads of the engine (``self.engine.x``, ``e.x`` for ``e =
  self.engine``, ``engine.x`` in its constructor) is declared in its host
  protocol, what it calls of another part through it is that part's public
  method, and everything declared is there on a real engine;
- a part does not import the engine's module.
"""
import ast
import os

import pytest

import twisted_stalk.pg as package
from twisted_stalk.core.sessions import SessionRules
from twisted_stalk.pg.tubes import TubeRegistry

PG = os.path.dirname(package.__file__)
MODULES = sorted(f[:-3] for f in os.listdir(PG) if f.endswith(".py"))
#: Part module -> (its class, its host protocol, the engine attribute holding it).
PARTS = {
    "stats": ("Stats", "StatsHost", "statistics"),
    "upkeep": ("Upkeep", "UpkeepHost", "upkeep"),
    "taking": ("Taking", "TakingHost", "taking"),
    "waiting": ("Reserver", "ReserverHost", "reserver"),
    "listing": ("Listing", "ListingHost", "listing"),
}
BASE_NAMES = {name for cls in (SessionRules, TubeRegistry)
              for name in list(vars(cls)) + list(getattr(cls, "__annotations__", {}))}


def _tree(module):
    with open(os.path.join(PG, module + ".py")) as f:
        return ast.parse(f.read())


def _class(module, name):
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"{module} has no class {name}")


def _declared(module, host):
    """The members a host protocol declares (annotations and methods)."""
    names = set()
    for node in _class(module, host).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


def _is_engine(node, aliases):
    """``self.engine``, a local bound to it, or the constructor's ``engine``."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    return (isinstance(node, ast.Attribute) and node.attr == "engine"
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def _engine_aliases(tree):
    names = {"engine"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_engine(node.value, set()):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _name(node):
    """``x`` or ``self.x`` as written (None: neither)."""
    if isinstance(node, ast.Name):
        return node.id
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "self"):
        return "self." + node.attr
    return None


def _uses(module):
    """(engine member, member of it or None, line) for each use of the engine
    (``x = e.reserver`` then ``x.hold``: ``("reserver", "hold")``)."""
    tree = _tree(module)
    aliases = _engine_aliases(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    parts = {}  # local name -> the engine member it was bound to
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                and _is_engine(node.value.value, aliases)):
            parts.update((t.id, node.value.attr) for t in node.targets
                         if isinstance(t, ast.Name))
            parts.update(("self." + t.attr, node.value.attr) for t in node.targets
                         if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                         and t.value.id == "self")
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_engine(node.value, aliases):
            outer = parents.get(node)
            inner = outer.attr if isinstance(outer, ast.Attribute) else None
            out.append((node.attr, inner, node.lineno))
        elif isinstance(node, ast.Attribute) and _name(node.value) in parts:
            out.append((parts[_name(node.value)], node.attr, node.lineno))
    return out


def test_the_engine_derives_from_the_shared_bases_only():
    from twisted_stalk.pg.engine import PgEngine
    assert PgEngine.__bases__ == (TubeRegistry, SessionRules)


def test_no_module_reaches_into_private_members_but_the_bases_declared():
    found = []
    for module in MODULES:
        tree = _tree(module)
        aliases = _engine_aliases(tree)
        allowed = set()
        if module in PARTS:
            allowed = _declared(module, PARTS[module][1]) & BASE_NAMES
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if _is_engine(owner, aliases) and node.attr in allowed:
                continue
            found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    assert found == []


@pytest.fixture(scope="module")
def engine():
    """An engine as built (no database: nothing connects until ``start``)."""
    from twisted.internet.task import Clock

    from twisted_stalk.pg.config import parse
    from twisted_stalk.pg.engine import PgEngine
    return PgEngine(Clock(), parse("host=/nonexistent dbname=x"))


@pytest.mark.parametrize("module", sorted(PARTS))
def test_a_part_uses_of_the_engine_what_it_declares(module, engine):
    parts = {attr for _, _, attr in PARTS.values()}
    declared = _declared(module, PARTS[module][1])
    undeclared, private = [], []
    for member, inner, line in _uses(module):
        if member not in declared:
            undeclared.append(f"{module}:{line} engine.{member}")
        elif member in parts and inner is not None and (
                inner.startswith("_") or not hasattr(getattr(engine, member), inner)):
            private.append(f"{module}:{line} engine.{member}.{inner}")
    assert undeclared == [] and private == []
    assert "from .engine" not in open(os.path.join(PG, module + ".py")).read()


def test_what_the_parts_declare_is_there_on_an_engine(engine):
    missing = [f"{PARTS[m][1]}.{name}" for m in PARTS for name in _declared(m, PARTS[m][1])
               if not hasattr(engine, name)]
    assert missing == []
    for module, (cls, _, attr) in PARTS.items():
        assert type(getattr(engine, attr)).__name__ == cls
