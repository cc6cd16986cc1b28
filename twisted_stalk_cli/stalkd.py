"""``stalkd``: the drop-in for the ``beanstalkd`` command, as installed.

The command line (beanstalkd's flags, the early bind, the exit statuses) is the
server's and lives in the library, :mod:`twisted_stalk.stalkd`, which
``python -m twisted_stalk`` also runs; this module is the ``stalkd`` entry
point and ``python -m twisted_stalk_cli.stalkd``.
"""
import sys

from twisted_stalk.stalkd import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
