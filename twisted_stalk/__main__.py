# -*- test-case-name: tests.test_packaging -*-
"""``python -m twisted_stalk``: the server, as ``stalkd`` (beanstalkd's flags)."""
import sys

from .stalkd import main

if __name__ == "__main__":
    sys.exit(main())
