# -*- test-case-name: tests.test_packaging -*-
"""twisted-stalk: a beanstalkd-compatible work-queue server, client and shell on Twisted."""

__version__ = "0.1.0"

#: The beanstalkd protocol version whose replies this package reproduces.
PROTOCOL_VERSION = "1.13"
