# -*- test-case-name: tests.test_packaging -*-
"""twistd plugins: the ``beanstalk`` service and the ``stalk-epoll`` reactor.

    twistd -n beanstalk
    twistd -n --reactor=stalk-epoll beanstalk     # the leaner epoll loop stalkd uses
"""
from twisted.application.reactors import Reactor
from twisted.application.service import ServiceMaker

beanstalk = ServiceMaker(
    "twisted-stalk",
    "twisted_stalk.tap",
    "A beanstalkd-compatible work-queue server.",
    "beanstalk",
)

stalkEpoll = Reactor(
    "stalk-epoll",
    "twisted_stalk.server.reactor",
    "epoll reactor without per-event log-context wrapping (twisted-stalk).",
)
