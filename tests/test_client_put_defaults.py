"""One set of put defaults: a job put without priority/TTR gets the same ones
from the client library, the pool, the shell (``stalk put`` and ``put`` typed
without numbers), the web console and the testing double.

Before, the library put with priority 2**31 and TTR 120 while the shell and
the console used 1024 and 60, so jobs put by hand jumped ahead of the
library's.
"""
import os
import subprocess
import sys

from twisted.internet import defer, reactor
from twisted.trial import unittest

from servers import start_server
from twisted_stalk.client import DEFAULT_PRIORITY, DEFAULT_TTR, BeanstalkClient
from twisted_stalk.protocol.constants import (
    DEFAULT_PUT_DELAY,
    DEFAULT_PUT_PRIORITY,
    DEFAULT_PUT_TTR,
)
from twisted_stalk.testing import MemoryBeanstalk
from twisted_stalk_cli.shell.request import DEFAULT_PUT, build_request

STALK = [sys.executable, "-m", "twisted_stalk_cli.shell"]


def test_every_front_end_takes_the_one_default():
    from twisted_stalk.web import api
    assert (DEFAULT_PRIORITY, DEFAULT_TTR) == (DEFAULT_PUT_PRIORITY, DEFAULT_PUT_TTR)
    assert DEFAULT_PUT == (DEFAULT_PUT_PRIORITY, DEFAULT_PUT_DELAY, DEFAULT_PUT_TTR)
    assert api._PUT_DEFAULTS == {"pri": DEFAULT_PUT_PRIORITY, "delay": DEFAULT_PUT_DELAY,
                                 "ttr": DEFAULT_PUT_TTR}
    # ``put`` typed in the shell without numbers.
    wire = build_request("put\nhello").wire()
    assert wire == b"put %d 0 %d 5\r\nhello\r\n" % (DEFAULT_PUT_PRIORITY, DEFAULT_PUT_TTR)


def test_the_testing_double_puts_with_the_default():
    server = MemoryBeanstalk()
    client = server.client()
    job_id = server.result(client.put(b"x"))
    stats = server.result(client.stats_job(job_id))
    assert (stats["pri"], stats["ttr"]) == (DEFAULT_PUT_PRIORITY, DEFAULT_PUT_TTR)


class WireTests(unittest.TestCase):
    """A job put by the library and one put by ``stalk put``, over real sockets."""

    timeout = 30

    def setUp(self):
        self.server = start_server("ours")
        self.addCleanup(self.server.stop)
        self.client = BeanstalkClient(f"tcp:127.0.0.1:{self.server.port}", reactor=reactor)
        self.addCleanup(self.client.close)
        return self.client.connect()

    @defer.inlineCallbacks
    def test_library_and_shell_jobs_get_the_same_priority_and_ttr(self):
        tube = f"defaults{os.getpid()}"
        lib = yield self.client.tube(tube).put(b"from the library")
        env = dict(os.environ, STALK_CONFIG=os.devnull)
        env.pop("STALK_ADDRESS", None)
        p = subprocess.run(STALK + ["-a", f"127.0.0.1:{self.server.port}", "put", "-t", tube,
                                    "from the shell"],
                           capture_output=True, env=env, timeout=20)
        assert p.returncode == 0, p.stderr
        shell = int(p.stdout.split()[1])
        got = []
        for job_id in (lib, shell):
            stats = yield self.client.stats_job(job_id)
            got.append((stats["pri"], stats["ttr"]))
        assert got == [(DEFAULT_PUT_PRIORITY, DEFAULT_PUT_TTR)] * 2


def test_the_console_put_form_starts_with_the_defaults(tmp_path):
    """The console's put form (a real Chromium) starts with the server's one
    set of defaults and puts with them (the form said 1024 and 60 before)."""
    import socket

    import pytest
    browser_test = pytest.importorskip("test_web_browser")
    from selenium.webdriver.common.by import By
    from web_harness import cheap_hash
    from wire import Wire

    auth = tmp_path / "console.auth"
    auth.write_text(f"user alice admin {cheap_hash('wonderland')}\n")
    server, base = browser_test._console(tmp_path, "--web-auth", str(auth))
    browser = browser_test.browser.__wrapped__()  # the browser test's Chromium
    driver = next(browser)
    try:
        w = Wire(socket.create_connection(server.address, timeout=5))
        assert w.ask(b"use form\r\n") == b"USING form\r\n"
        driver.get(base + "#/tube/form")
        browser_test._wait(driver, lambda d: d.find_elements(By.ID, "login-user"))
        driver.find_element(By.ID, "login-user").send_keys("alice")
        driver.find_element(By.ID, "login-password").send_keys("wonderland")
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        browser_test._wait(driver, lambda d: "alice" in (browser_test._text(d, "#who") or ""))
        driver.get(base + "#/tube/form")
        browser_test._wait(driver, lambda d: d.find_elements(By.ID, "put-pri"))
        values = [driver.find_element(By.ID, i).get_attribute("value")
                  for i in ("put-pri", "put-delay", "put-ttr")]
        assert values == [str(DEFAULT_PUT_PRIORITY), str(DEFAULT_PUT_DELAY), str(DEFAULT_PUT_TTR)]
        driver.find_element(By.ID, "put-body").send_keys("from the console")
        browser_test._click(driver, "button[data-action=put]")
        found: list = []

        def put_seen(_: object) -> bool:
            reply = w.ask(b"peek-ready\r\n")
            if reply.startswith(b"FOUND "):
                found.append(int(reply.split()[1]))
            return bool(found)
        browser_test._wait(driver, put_seen)
        stats = w.ask(b"stats-job %d\r\n" % found[0])
        assert b"pri: %d\n" % DEFAULT_PUT_PRIORITY in stats and b"ttr: %d\n" % DEFAULT_PUT_TTR in stats
        w.sock.close()
    finally:
        next(browser, None)  # quits Chromium
        server.stop()
