# -*- test-case-name: tests.test_shell_units -*-
"""What the interactive shell has seen: tube names and job ids, for completion."""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Dict, Sequence

from twisted_stalk.protocol.commands import command_spec
from twisted_stalk.protocol.replies import Reply


class Known:
    """Tube names and job ids the shell has seen, most recent first."""

    def __init__(self, limit: int = 200) -> None:
        self.limit = limit
        self.tubes: "OrderedDict[str, None]" = OrderedDict({"default": None})
        self.jobs: "OrderedDict[int, str]" = OrderedDict()
        self.tubes_fetched = 0.0

    def add_tube(self, name: str) -> None:
        self.tubes[name] = None
        self.tubes.move_to_end(name, last=False)

    def _add_tubes(self, names: Sequence[str]) -> None:
        for name in reversed(names):
            if name not in self.tubes:
                self.add_tube(name)

    def set_tubes(self, names: Sequence[str]) -> None:
        """The server's whole tube list (``list-tubes``): tubes it does not
        list any more are forgotten."""
        self._add_tubes(names)
        for name in list(self.tubes):
            if name not in names:
                del self.tubes[name]
        self.tubes_fetched = time.monotonic()

    def add_job(self, job_id: int, note: str) -> None:
        self.jobs[job_id] = note
        self.jobs.move_to_end(job_id, last=False)
        while len(self.jobs) > self.limit:
            self.jobs.popitem(last=True)

    def returned(self, job_ids: Sequence[int]) -> None:
        """The server returned these reserved jobs to ready (their
        connection closed): they are no longer "reserved"."""
        for job_id in job_ids:
            if job_id in self.jobs:
                self.jobs[job_id] = "returned to ready"

    def forget_job(self, job_id: int) -> None:
        self.jobs.pop(job_id, None)

    def learn(self, args: Sequence[str], reply: Reply) -> None:
        """Learn from ``reply`` to its command with ``args``."""
        command = reply.command or None
        word = reply.word
        jid = reply.job_id
        if word == "INSERTED" and jid is not None:
            self.add_job(jid, "inserted")
        elif word == "BURIED" and jid is not None:
            self.add_job(jid, "buried")
        elif word == "RESERVED" and jid is not None:
            self.add_job(jid, "reserved")
        elif word == "FOUND" and jid is not None:
            self.add_job(jid, command or "found")
        elif word == "USING" and reply.tube is not None:
            self.add_tube(reply.tube)
        elif word == "WATCHING" and command == "watch" and args:
            self.add_tube(args[0])
        elif command == "delete" and args and reply.ok:
            try:
                self.forget_job(int(args[0]))
            except ValueError:
                pass
        elif word == "OK" and reply.ok and reply.value is not None:
            if command == "list-tubes":
                self.set_tubes(reply.value)  # type: ignore[arg-type]
            elif command == "list-tubes-watched":
                self._add_tubes(reply.value)  # type: ignore[arg-type]
            elif command == "list-jobs":
                state = args[1] if len(args) > 1 else "listed"
                for listed in reversed(reply.value):  # type: ignore[call-overload]
                    self.add_job(listed, state)
            elif command in ("stats-tube", "stats-job"):
                stats: Dict[str, Any] = reply.value  # type: ignore[assignment]
                name = stats.get("name") or stats.get("tube")
                if isinstance(name, str):
                    self.add_tube(name)
                if command == "stats-job" and isinstance(stats.get("id"), int):
                    self.add_job(stats["id"], str(stats.get("state", "job")))
        if word == "NOT_FOUND" and command and args:
            self._not_found(command, args[0])

    def _not_found(self, command: str, first: str) -> None:
        """NOT_FOUND to ``command`` whose first argument is ``first``: a job
        that does not exist is forgotten; one that may still exist (reserved
        by another connection, not reserved by this one, in a state the
        command cannot take: the table's ``gone_if_not_found``) is still
        offered, noted with what the server said (the Tab's background
        ``stats-job`` check forgets it if it is gone)."""
        spec = command_spec(command)
        if spec is None or not spec.args or spec.args[0].name != "id":
            return
        try:
            job_id = int(first)
        except ValueError:
            return
        if spec.gone_if_not_found:
            self.forget_job(job_id)
        elif job_id in self.jobs:
            self.jobs[job_id] = f"{command}: NOT_FOUND"


__all__ = ["Known"]
