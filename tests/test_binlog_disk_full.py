"""A disk full of *live* jobs, then a crash: the restart is refused, with one
line, until a new binlog file fits; nothing is lost meanwhile
(docs/persistence.md, "When the disk fills up")."""
from __future__ import annotations

import signal
import subprocess

from servers import free_port, ours_command
from test_binlog_server import (  # noqa: F401  (fixtures: tmpfs; stopping what a test started)
    _close_connections_and_servers, connect, delete_all, put, put_until_refused, start_server,
    stats, tmpfs)


def test_full_disk_of_live_jobs_refuses_the_restart_until_a_file_fits(tmpfs):
    d = tmpfs("1m")
    flags = ("-b", d, "-s", "131072")
    srv = start_server("ours", *flags)
    acked = put_until_refused(connect(srv), b"j" * 1000)
    assert len(acked) > 500
    srv.stop(signal.SIGKILL)
    done = subprocess.run(ours_command(free_port(), *flags), capture_output=True, timeout=30)
    assert done.returncode == 10
    assert done.stderr.decode().splitlines() == [
        f"stalkd: cannot write to binlog directory {d}: No space left on device"]
    # The way out without more space: start once with small files (the restart
    # gives back the unused end of the last file), and let workers delete jobs.
    srv = start_server("ours", "-b", d, "-s", "4096")
    w = connect(srv)
    assert stats(w)["current-jobs-ready"] == str(len(acked))
    assert w.ask(b"peek %d\r\n" % acked[-1]).startswith(b"FOUND %d 1000\r\n" % acked[-1])
    delete_all(w, acked[:300])
    assert srv.stop() == 0
    srv = start_server("ours", *flags)  # the usual flags work again
    w = connect(srv)
    assert stats(w)["current-jobs-ready"] == str(len(acked) - 300)
    assert put(w, b"room again") > acked[-1]
    assert srv.stop() == 0
