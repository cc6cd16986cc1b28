# -*- test-case-name: tests.test_shell_cli -*-
"""``python -m twisted_stalk_cli.shell``: the ``stalk`` command."""
import sys

from . import main

sys.exit(main())
