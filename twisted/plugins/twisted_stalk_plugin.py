"""twistd plugin: ``twistd -n beanstalk``."""
from twisted.application.service import ServiceMaker

beanstalk = ServiceMaker(
    "twisted-stalk",
    "twisted_stalk.server.tap",
    "A beanstalkd-compatible work-queue server.",
    "beanstalk",
)
