# -*- test-case-name: tests.test_web_api -*-
"""The console's state next to the server: engine, rate sampler, tasks, logins."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from twisted.internet.defer import Deferred

from ..core.engine import Engine
from .auth import Credentials, Identity
from .login import Logins
from .sampler import Sampler
from .tasks import Tasks

if TYPE_CHECKING:  # pragma: no cover
    from ..server.factory import BeanstalkServerFactory


class ConsoleFrontEnd:
    """The front end of a console session.  A console never waits in a
    reserve, so no wake-up comes; it names who acts, for the connections list."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    def wake(self, outcome: object) -> None:  # pragma: no cover - never waits
        pass


class Console:
    """One server's console: what every resource of the site reads and uses."""

    def __init__(self, factory: BeanstalkServerFactory, reactor, credentials: Optional[Credentials] = None,
                 slice_budget: float = 0.004, run_check=None) -> None:
        self.factory = factory
        self.engine: Engine = factory.engine
        self.reactor = reactor
        self.sampler = Sampler(self.engine)
        self.tasks = Tasks(self, slice_budget)
        self.logins = Logins(credentials, run_check=run_check)
        #: Searches running now (each holds one request open).
        self.searches = 0

    def now(self) -> float:
        return self.reactor.seconds()

    def open_session(self, identity: Identity):
        """An engine session for one action of ``identity`` (close it after)."""
        return self.engine.open_session(ConsoleFrontEnd(identity))

    def close_session(self, session) -> None:
        self.engine.close_session(session)
        self.deliver()

    def deliver(self) -> None:
        """Deliver the wake-ups the console's commands caused (and re-arm the
        server's timer), as the wire front end does after each read."""
        self.factory.after_input()

    async def settled(self) -> None:
        """Wait until the journal has written what the console changed."""
        journal = self.engine.journal
        if journal.pending:
            d: Deferred = Deferred()
            journal.when_settled(lambda: d.callback(None))
            await d

    def start(self) -> None:
        self.sampler.start(self.reactor)

    def stop(self) -> None:
        self.sampler.stop()


__all__ = ["Console", "ConsoleFrontEnd"]
