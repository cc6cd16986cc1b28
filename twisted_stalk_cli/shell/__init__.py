# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk``: an interactive shell and command-line toolkit for beanstalk servers.

::

    stalk [-a HOST:PORT | --url tcp:...|unix:...|tls:...]      interactive shell
    stalk [options] COMMAND [ARGS...]                           one protocol command
    stalk [options] -            (or a pipe on stdin)           commands from stdin
    stalk [options] top|tail|put|flush|move|kick|stats ...      tools

One idea per module:

* :mod:`.main` -- options, configuration, which mode to run (``main``);
* :mod:`.errors` -- exit statuses and errors; :mod:`.paths` -- XDG directories;
* :mod:`.target` -- server addresses and TLS;
* :mod:`.conn` -- the blocking connection (encoding from the command table,
  replies read by :class:`twisted_stalk.protocol.reader.ReplyReader`);
* :mod:`.tracked` -- a connection plus the use/watch/reserved state kept
  across reconnects;
* :mod:`.request` -- what the user typed, turned into requests;
  :mod:`.script` -- entries read from stdin;
* :mod:`.render` -- showing replies; :mod:`.output` -- printing them in a format;
* :mod:`.run` -- command-line mode; :mod:`.repl`, :mod:`.ui`, :mod:`.known`,
  :mod:`.help` -- the interactive shell;
* :mod:`.tools` -- ``top``, ``tail``, ``put``, ``flush``, ``move``, ``kick``,
  ``stats``, one module each.
"""
from .main import main

__all__ = ["main"]
