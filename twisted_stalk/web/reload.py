# -*- test-case-name: tests.test_web_reload -*-
"""SIGHUP: the console reads its ``--web-auth`` file again, without a restart.

``systemctl reload`` (the units' ``ExecReload=``) or ``kill -HUP PID`` after
``python -m twisted_stalk.web.auth add ...``: the new users and tokens count
from then on, and the logins of a user who was removed, or whose password or
role changed, end.  One line says so; a file that cannot be read or is
malformed changes nothing, and one line says why (the server keeps the
credentials it had); a console without ``--web-auth`` only says it has
nothing to read.  The server reads the file as the user it runs as
(``User=stalk``, ``stalkd -u``), so that user must be able to read it
(``root:stalk 0640``, docs/deploy.md).
"""
from __future__ import annotations

import signal
from typing import Any, Optional

from twisted.logger import Logger

from ..wording import counted
from .auth import AuthFileError, load
from .login import Logins

log = Logger(namespace="twisted_stalk.web")


def reload_credentials(logins: Logins, path: Optional[str]) -> bool:
    """Read ``path`` again into ``logins``; True if it was taken."""
    if path is None:
        log.info("web console: SIGHUP: no --web-auth file to read again (the console is "
                 "read-only)")
        return False
    try:
        credentials = load(path)
    except AuthFileError as e:
        log.error("web console: credentials not reloaded, the {kept} loaded before stay "
                  "in force: {error}", kept=str(logins.credentials), error=str(e))
        return False
    ended = logins.replace_credentials(credentials)
    log.info("web console: credentials reloaded from {path}: {now}{ended}", path=path,
             now=str(credentials),
             ended=f"; {counted(ended, 'login')} ended (user removed or changed)"
             if ended else "")
    return True


def reload_on_sighup(reactor: Any, logins: Logins, path: Optional[str]) -> None:
    """From now on SIGHUP reloads ``path`` (on the reactor's next turn; None:
    the console has no credentials file, and a line says so).  A
    handler that was there before (twistd's log rotation) still runs.  Call
    from the main thread."""
    previous = signal.getsignal(signal.SIGHUP)

    def on_sighup(signum: int, frame: Any) -> None:
        reactor.callFromThread(reload_credentials, logins, path)
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGHUP, on_sighup)


__all__ = ["reload_credentials", "reload_on_sighup"]
