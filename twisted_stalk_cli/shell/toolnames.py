# -*- test-case-name: tests.test_shell_cli -*-
"""The names of ``stalk``'s tools (``stalk TOOL``), in the order ``stalk
--help`` lists them; ``tools/<name>.py`` is each one.

A module of its own, importing nothing, so that the request reader can tell a
tool's name from a command's (``top`` typed at the prompt) without importing
the tools, which import it.
"""

TOOL_NAMES = ("top", "tail", "put", "flush", "move", "kick", "stats")

__all__ = ["TOOL_NAMES"]
