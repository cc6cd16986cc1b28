"""The console end to end in a real browser: headless Debian Chromium through
chromedriver (selenium), against ``stalkd --web``, every change checked over
the wire protocol.  Saves the screenshots docs/web.md shows.

Skips only when Chromium, chromedriver or selenium is missing (``.ci/run``
installs them).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from servers import free_port
from test_ops_helpers import start_stalkd, wait_http
from web_harness import cheap_hash
from wire import Wire

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
webdriver = pytest.importorskip(
    "selenium.webdriver", reason="the browser test needs selenium (pip install -e '.[test]')")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("the browser test needs Debian's chromium and chromium-driver "
                "(apt-get install chromium chromium-driver; .ci/run does)",
                allow_module_level=True)

from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

#: Set STALK_SCREENSHOTS to a directory (docs/images) to keep the screenshots there.
SCREENSHOTS = os.environ.get("STALK_SCREENSHOTS")
HTML_BODY = b'<b id="injected">bold</b><script>window.pwned = 1</script>'


@pytest.fixture(scope="module")
def browser():
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="stalk-chromium-")
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _wait(driver, condition, timeout=10.0):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d))


def _click(driver, css):
    """Click ``css``; the page redraws every second, so retry a stale element."""
    from selenium.common.exceptions import StaleElementReferenceException

    def click(d):
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
            return True
        except StaleElementReferenceException:
            return False
    _wait(driver, click)


def _text(driver, css):
    """The shown text of the first element matching ``css`` (None: no such element)."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", css)


def _screenshot(driver, tmp_path, name):
    path = os.path.join(SCREENSHOTS or str(tmp_path), name)
    assert driver.save_screenshot(path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _console(tmp_path, *flags):
    web_port = free_port()
    server = start_stalkd(tmp_path, "--web", f"tcp:{web_port}:interface=127.0.0.1", *flags)
    base = f"http://127.0.0.1:{web_port}/"
    wait_http(base)
    return server, base


def _post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_console_in_a_browser(tmp_path, browser):
    started = time.monotonic()
    auth = tmp_path / "console.auth"
    auth.write_text(f"user alice admin {cheap_hash('wonderland')}\n")
    server, base = _console(tmp_path, "--web-auth", str(auth))
    try:
        w = Wire(socket.create_connection(server.address, timeout=5))
        assert w.ask(b"use emails\r\n") == b"USING emails\r\n"
        for i in range(120):
            w.send(b"put %d 0 120 11\r\nmessage %03d\r\n" % (1000 + i, i))
        for _ in range(120):
            assert w.reply().startswith(b"INSERTED")
        html_id = int(w.ask(b"put 5 0 120 %d\r\n%s\r\n" % (len(HTML_BODY), HTML_BODY)).split()[1])
        assert w.ask(b"use thumbs\r\n") == b"USING thumbs\r\n"
        buried = []
        for i in range(2):
            job_id = int(w.ask(b"put 0 0 120 5\r\nthumb\r\n").split()[1])
            assert w.ask(b"reserve-job %d\r\n" % job_id).startswith(b"RESERVED")
            assert w.ask(b"bury %d 0\r\n" % job_id) == b"BURIED\r\n"
            buried.append(job_id)
        w.ask(b"use default\r\n")

        # Log in, then the overview shows the counts.
        browser.get(base)
        _wait(browser, lambda d: d.find_elements(By.ID, "login-user"))
        browser.find_element(By.ID, "login-user").send_keys("alice")
        browser.find_element(By.ID, "login-password").send_keys("wonderland")
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        ready = 'tr[data-tube="emails"] td[data-col="ready"]'
        _wait(browser, lambda d: _text(d, ready) == "121")
        assert _text(browser, 'tr[data-tube="thumbs"] td[data-col="buried"]') == "2"
        assert "alice (admin)" in _text(browser, "#who")
        _screenshot(browser, tmp_path, "overview.png")

        # A tube's jobs, page by page; the HTML body shows as text.
        _click(browser, 'tr[data-tube="emails"] a')
        _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == "1")
        assert "1–50" in _text(browser, ".pager [data-range]")
        _click(browser, ".pager button[data-page=next]")
        _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == "51")
        _click(browser, ".pager button[data-page=next]")
        _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == "101")
        row = f'#jobs tbody tr[data-job="{html_id}"] td.preview'
        _wait(browser, lambda d: _text(d, row) == HTML_BODY.decode())
        assert browser.find_elements(By.ID, "injected") == []
        assert browser.execute_script("return window.pwned") is None
        _click(browser, ".pager button[data-page=prev]")
        _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == "51")
        _click(browser, ".pager button[data-page=prev]")
        _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == "1")
        _screenshot(browser, tmp_path, "tube.png")

        # Delete one job (select it, Delete).
        _click(browser, '#jobs input[data-id="3"]')
        _click(browser, "button[data-action=delete-selected]")
        _wait(browser, lambda d: "delete" in (_text(d, "#notice") or ""))
        assert w.ask(b"peek 3\r\n") == b"NOT_FOUND\r\n"

        # Pause the tube.
        pause = browser.find_element(By.ID, "pause-seconds")
        pause.clear()
        pause.send_keys("90")
        _click(browser, "button[data-action=pause]")
        _wait(browser, lambda d: "paused" in (_text(d, "#tube-badge") or ""))
        assert b"pause: 90\n" in w.ask(b"stats-tube emails\r\n")

        # Kick a buried job from its own page.
        browser.get(base + f"#/job/{buried[0]}")
        _wait(browser, lambda d: _text(d, '#job-stats dd[data-field="state"]') == "buried")
        assert _text(browser, "#job-body") == "thumb"
        _click(browser, "button[data-action=kick]")
        _wait(browser, lambda d: _text(d, '#job-stats dd[data-field="state"]') == "ready")
        assert b"state: ready\n" in w.ask(b"stats-job %d\r\n" % buried[0])
        w.sock.close()
    finally:
        server.stop()

    # Without credentials: read-only, no action buttons, and the API says 403.
    server, base = _console(tmp_path)
    try:
        w = Wire(socket.create_connection(server.address, timeout=5))
        assert w.ask(b"use work\r\n") == b"USING work\r\n"
        assert w.ask(b"put 0 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
        browser.get(base + "#/tube/work")
        _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == "1")
        assert "read-only" in _text(browser, "#who")
        assert browser.find_elements(By.ID, "tube-actions") == []
        assert browser.find_elements(By.CSS_SELECTOR, "button[data-action]") == []
        browser.get(base + "#/job/1")
        _wait(browser, lambda d: _text(d, '#job-stats dd[data-field="state"]') == "ready")
        assert browser.find_elements(By.CSS_SELECTOR, "button[data-action]") == []
        assert _post(base + "api/v1/jobs/delete", {"ids": [1]}) == 403
        assert w.ask(b"peek 1\r\n") == b"FOUND 1 2\r\nhi\r\n"
        w.sock.close()
    finally:
        server.stop()
    assert time.monotonic() - started < 60
