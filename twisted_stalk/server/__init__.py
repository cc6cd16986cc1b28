# -*- test-case-name: tests.test_wire -*-
"""The beanstalk server on Twisted: protocol, factory, twistd service.

The factory and protocol are imported when first asked for, so that the
package's Twisted-free modules (:mod:`.render`, :mod:`.facts`,
:mod:`.output`, :mod:`._early`) can be imported before Twisted is
(``stalkd`` serves its first connections with them while Twisted loads).
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

_LAZY = {"BeanstalkServerFactory": "factory", "BeanstalkServerProtocol": "protocol"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    return getattr(import_module(f".{module}", __name__), name)


__all__ = ["BeanstalkServerFactory", "BeanstalkServerProtocol"]
