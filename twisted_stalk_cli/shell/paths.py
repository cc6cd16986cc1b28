# -*- test-case-name: tests.test_shell_cli -*-
"""Where the shell keeps its files: XDG data, state and config directories."""
from __future__ import annotations

import os


def data_home() -> str:
    """``$XDG_DATA_HOME/stalk`` (``~/.local/share/stalk``): the history."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "stalk")


def state_home() -> str:
    """``$XDG_STATE_HOME/stalk`` (``~/.local/state/stalk``): move journals."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "stalk")


def config_home() -> str:
    """``$XDG_CONFIG_HOME/stalk`` (``~/.config/stalk``): the config file."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "stalk")


__all__ = ["config_home", "data_home", "state_home"]
