"""The client package's shape: no import circles, a pool that uses the
client's public members only, races and servers that report to the pool
through their small host interfaces (tests/test_structure.py keeps every
module of the library small)."""
import ast
import os
import re

import twisted_stalk.client as package

CLIENT = os.path.dirname(package.__file__)
MODULES = sorted(f[:-3] for f in os.listdir(CLIENT) if f.endswith(".py"))


def _tree(module):
    with open(os.path.join(CLIENT, module + ".py")) as f:
        return ast.parse(f.read())


def _imports(module):
    """The client modules ``module`` imports, anywhere in it (``TYPE_CHECKING``
    blocks and function bodies included: a circle there is a circle too)."""
    out = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                out.add(node.module.split(".")[0])
            elif node.level == 1:
                out.update(a.name for a in node.names if a.name in MODULES)
            elif node.module and node.module.startswith("twisted_stalk.client."):
                out.add(node.module.split(".")[2])
    return out - {"__init__"}


def test_no_import_circles():
    """Not even through ``TYPE_CHECKING`` imports (tests/test_structure.py
    looks at the imports that run, in the whole tree)."""
    from test_structure import circles_in
    assert circles_in({m: _imports(m) for m in MODULES if m != "__init__"}) == []


def test_the_pool_uses_the_clients_public_members():
    text = ""
    for m in MODULES:
        if m == "pool" or m.startswith("pool_"):  # the pool and its parts
            with open(os.path.join(CLIENT, m + ".py")) as f:
                text += f.read()
    assert not re.findall(r"\._main\.|\._inflight|client\._use|client\._watch|_head_since", text)


def _private_uses(module, names):
    """``X._private`` where X is one of ``names`` (or ``self.X``)."""
    found = []
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            owner = node.value
            if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) \
                    and owner.value.id == "self":
                owner = ast.Name(owner.attr)
            if isinstance(owner, ast.Name) and owner.id in names:
                found.append(f"{module}:{node.lineno} {owner.id}.{node.attr}")
    return found


def test_races_and_servers_report_through_their_host_interfaces():
    assert _private_uses("race", {"pool"}) == []
    assert _private_uses("members", {"pool", "client"}) == []
    assert "from .pool" not in open(os.path.join(CLIENT, "race.py")).read()
    assert "from .pool" not in open(os.path.join(CLIENT, "members.py")).read()


def test_arguments_are_checked_by_the_kinds_of_the_command_table():
    import pytest

    from twisted_stalk.client import InvalidArgument
    from twisted_stalk.client._validate import KIND_CHECKS, command_args
    from twisted_stalk.protocol.commands import COMMANDS, EXTENSION_COMMANDS

    good = {"tube": b"emails", "state": "ready"}
    bad = {"tube": "#", "state": "nope"}
    for spec in COMMANDS + EXTENSION_COMMANDS:
        args = [a for a in spec.args if a.kind != "bytes"]
        assert all(a.kind in KIND_CHECKS for a in args), spec.name
        values = [good.get(a.kind, 7) for a in args]
        assert command_args(spec.name, values) == tuple(values)
        for i, a in enumerate(args):
            wrong = list(values)
            wrong[i] = bad.get(a.kind, -1)
            with pytest.raises(InvalidArgument):
                command_args(spec.name, wrong)
