# -*- test-case-name: tests.test_wire -*-
"""The beanstalk server on Twisted: protocol, factory, twistd service."""
from .factory import BeanstalkServerFactory
from .protocol import BeanstalkServerProtocol

__all__ = ["BeanstalkServerFactory", "BeanstalkServerProtocol"]
