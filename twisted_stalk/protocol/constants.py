# -*- test-case-name: tests.test_protocol_table -*-
"""Numbers and reply words fixed by the beanstalk protocol (beanstalkd 1.13)."""
from __future__ import annotations

#: Longest command line, CRLF included (beanstalkd's LINE_BUF_SIZE).
MAX_LINE = 224
#: Longest command line without its CRLF.
MAX_LINE_CONTENT = MAX_LINE - 2
#: Default largest job body in bytes (``-z``).
DEFAULT_MAX_JOB_SIZE = 65535
#: Largest job body a server may be configured for (beanstalkd's JOB_DATA_SIZE_LIMIT_MAX).
MAX_JOB_SIZE_LIMIT = 1073741824
#: Ready jobs with a priority below this count as urgent.
URGENT_THRESHOLD = 1024
#: Longest tube name.
MAX_TUBE_NAME = 200
#: The reserved job's last second: a reserve issued in it gets DEADLINE_SOON.
SAFETY_MARGIN = 1.0
#: Largest ``reserve-with-timeout`` the server takes as such (beanstalkd keeps
#: it in a C int: larger values wrap).
MAX_RESERVE_TIMEOUT = 2**31 - 1
#: Largest u32 / u64 argument values.
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
#: Characters allowed in tube names.
NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()")
DEFAULT_TUBE = b"default"
#: The defaults of ``put`` (and of ``release``/``bury``'s priority) wherever a
#: caller leaves them out: the client library, the pool, the shell (``put``
#: without numbers, ``stalk put``), the web console and the testing double.
#: One set, so jobs put by hand never jump ahead of (or fall behind) the
#: library's.  The priority is the middle of the u32 range, as the classic
#: Python client (beanstalkc) uses: it leaves as much room above as below for
#: "more urgent" and "less urgent" jobs, and is far from the urgent range
#: (< :data:`URGENT_THRESHOLD`).  Libraries disagree (pheanstalk 1024,
#: greenstalk and beaneater 65536), so none is "the" convention; keeping the
#: library's values changes nothing for programs, only for hand-made jobs.
#: The TTR gives a handler two minutes before the server gives its job to
#: another worker: a TTR too short runs a job twice, one too long only delays
#: the retry after a crash.
DEFAULT_PUT_PRIORITY = 2**31
DEFAULT_PUT_DELAY = 0
DEFAULT_PUT_TTR = 120
#: The job states, in the order commands and messages list them.
JOB_STATES = ("ready", "delayed", "buried", "reserved")
#: The states of the jobs no worker holds (``flush-tube`` without a state).
UNRESERVED_STATES = JOB_STATES[:3]
DEFAULT_PORT = 11300
DEFAULT_BINLOG_SIZE = 10485760

# Reply lines that carry no argument, CRLF included.
OUT_OF_MEMORY = b"OUT_OF_MEMORY\r\n"
INTERNAL_ERROR = b"INTERNAL_ERROR\r\n"
BAD_FORMAT = b"BAD_FORMAT\r\n"
UNKNOWN_COMMAND = b"UNKNOWN_COMMAND\r\n"
EXPECTED_CRLF = b"EXPECTED_CRLF\r\n"
JOB_TOO_BIG = b"JOB_TOO_BIG\r\n"
DRAINING = b"DRAINING\r\n"
NOT_FOUND = b"NOT_FOUND\r\n"
DELETED = b"DELETED\r\n"
RELEASED = b"RELEASED\r\n"
BURIED = b"BURIED\r\n"
TOUCHED = b"TOUCHED\r\n"
KICKED = b"KICKED\r\n"
PAUSED = b"PAUSED\r\n"
TIMED_OUT = b"TIMED_OUT\r\n"
DEADLINE_SOON = b"DEADLINE_SOON\r\n"
NOT_IGNORED = b"NOT_IGNORED\r\n"
