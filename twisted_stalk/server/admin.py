"""Extension verbs for operators (``--extensions``; off by default).

They are new command names only, looked up on the server's UNKNOWN_COMMAND
branch (see ``BeanstalkServerProtocol.lineReceived``), so stock commands and
their replies never change and, with extensions off, these names answer
``UNKNOWN_COMMAND`` exactly as beanstalkd does.  None of the names starts with
a stock command's prefix (beanstalkd matches some words by prefix).

``list-jobs <tube> <state> <limit>``
    ``OK <bytes>`` and a YAML list of up to ``limit`` job ids of the tube in
    ``ready``/``delayed``/``buried``/``reserved`` state, in the order the
    queue takes them, without reserving anything.  ``NOT_FOUND`` if the tube
    does not exist.
``flush-tube <tube> [<state>]``
    Deletes the tube's jobs in ``state`` (without one: ready, delayed and
    buried, never jobs a worker holds) and answers ``FLUSHED <count>``.  Each
    deletion goes through the queue's journal (the binlog) as a delete, so a
    restart does not bring them back.  ``NOT_FOUND`` if the tube does not exist.
``capabilities``
    ``OK <bytes>`` and a YAML list of the extension verbs this server serves.

Malformed arguments answer ``BAD_FORMAT``; a binlog that cannot write answers
``INTERNAL_ERROR`` (as stock commands do) unless some jobs were already flushed.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from ..core import BURIED, DELAYED, READY, RESERVED, JournalError
from ..protocol import yaml
from ..protocol.commands import valid_tube_name
from ..protocol.constants import BAD_FORMAT, INTERNAL_ERROR, NOT_FOUND, U32_MAX

#: The extension verbs, in the order ``capabilities`` lists them.
VERBS = ("list-jobs", "flush-tube", "capabilities")

STATES: Dict[bytes, int] = {
    b"ready": READY, b"delayed": DELAYED, b"buried": BURIED, b"reserved": RESERVED,
}
#: What ``flush-tube <tube>`` without a state deletes.
DEFAULT_FLUSH_STATES = (READY, DELAYED, BURIED)


def _u32(text: bytes) -> Optional[int]:
    if text.isdigit() and len(text) <= 10:
        value = int(text)
        if value <= U32_MAX:
            return value
    return None


class Extensions:
    """Serves the extension verbs for one server; counts each verb."""

    def __init__(self) -> None:
        self.counts: Dict[str, int] = dict.fromkeys(VERBS, 0)
        self._capabilities = yaml.ok_reply(yaml.sequence([v.encode() for v in VERBS]))

    def dispatch(self, proto, line: bytes) -> bool:
        """Serve ``line`` if it names an extension verb; False otherwise."""
        sp = line.find(b" ")
        word = line if sp < 0 else line[:sp]
        handler = _VERBS.get(word)
        if handler is None:
            return False
        self.counts[word.decode()] += 1
        handler(self, proto, None if sp < 0 else line[sp + 1:])
        return True

    # The verbs.  ``text`` is the argument text after the verb's space
    # (None when the line is the bare verb).

    def list_jobs(self, proto, text: Optional[bytes]) -> None:
        parts = text.split(b" ") if text is not None else []
        if len(parts) != 3:
            proto._write(BAD_FORMAT)
            return
        name, state_name, limit_text = parts
        state = STATES.get(state_name)
        limit = _u32(limit_text)
        if not valid_tube_name(name) or state is None or limit is None:
            proto._write(BAD_FORMAT)
            return
        ids = proto.queue.list_jobs(name, state, limit)
        if ids is None:
            proto._write(NOT_FOUND)
            return
        proto._write(yaml.ok_reply(yaml.sequence([b"%d" % i for i in ids])))

    def flush_tube(self, proto, text: Optional[bytes]) -> None:
        parts = text.split(b" ") if text is not None else []
        if not 1 <= len(parts) <= 2 or not valid_tube_name(parts[0]):
            proto._write(BAD_FORMAT)
            return
        states = DEFAULT_FLUSH_STATES
        if len(parts) == 2:
            state = STATES.get(parts[1])
            if state is None:
                proto._write(BAD_FORMAT)
                return
            states = (state,)
        try:
            count = proto.queue.flush_tube(parts[0], states)
        except JournalError:
            proto._write(INTERNAL_ERROR)
            return
        proto._write(NOT_FOUND if count is None else b"FLUSHED %d\r\n" % count)

    def capabilities(self, proto, text: Optional[bytes]) -> None:
        proto._write(BAD_FORMAT if text is not None else self._capabilities)


_VERBS: Dict[bytes, Callable] = {
    b"list-jobs": Extensions.list_jobs,
    b"flush-tube": Extensions.flush_tube,
    b"capabilities": Extensions.capabilities,
}


def enable(factory) -> Extensions:
    """Turn the extension verbs on for ``factory``'s connections."""
    ext = factory.extensions = Extensions()
    return ext


def verbs() -> List[str]:
    return list(VERBS)


__all__ = ["DEFAULT_FLUSH_STATES", "Extensions", "STATES", "VERBS", "enable", "verbs"]
