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
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})
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


#: The screenshots docs/web.md shows; the others stay in the test's tmp_path.
DOC_IMAGES = {"overview.png", "tube.png", "job.png"}


def _screenshot(driver, tmp_path, name):
    path = os.path.join(SCREENSHOTS if SCREENSHOTS and name in DOC_IMAGES else str(tmp_path),
                        name)
    assert driver.save_screenshot(path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _busy_until_charted(driver, w, samples=4, timeout=15.0):
    """For the documentation's screenshots only: put and delete jobs in a tube
    until the server's chart shows ``samples`` samples of it."""
    assert w.ask(b"use reports\r\n") == b"USING reports\r\n"
    deadline = time.monotonic() + timeout
    points = "const p = document.querySelector('#server-chart polyline');" \
             "return p ? p.points.length : 0"
    n = 0
    while driver.execute_script(points) < samples and time.monotonic() < deadline:
        n += 1
        ids = [int(w.ask(b"put 10 0 60 6\r\nreport\r\n").split()[1])
               for _ in range(8 + n % 5 * 6)]
        for job_id in ids[:n % 3 * 4]:
            assert w.ask(b"delete %d\r\n" % job_id) == b"DELETED\r\n"
        time.sleep(0.1)
    w.ask(b"use default\r\n")


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
        if SCREENSHOTS:
            _busy_until_charted(browser, w)
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

        # Delete one job (select it, Delete, confirm).
        _click(browser, '#jobs input[data-id="3"]')
        _click(browser, "button[data-action=delete-selected]")
        assert _text(browser, "#confirm-delete") == "Delete 1 job? This cannot be undone."
        _click(browser, "button[data-action=confirm-delete]")
        _wait(browser, lambda d: "elete" in (_text(d, "#notice") or ""))
        assert _text(browser, "#notice") == "Deleted job 3"
        assert w.ask(b"peek 3\r\n") == b"NOT_FOUND\r\n"

        # Pause the tube.
        pause = browser.find_element(By.ID, "pause-seconds")
        pause.clear()
        pause.send_keys("90")
        _click(browser, "button[data-action=pause]")
        _wait(browser, lambda d: "paused" in (_text(d, "#tube-badge") or ""))
        assert _text(browser, "#notice") == "Paused tube emails for 90 s"
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


# ------------------------------------------------------- the finished console

def _script_errors(driver):
    """The page's script errors since the last call (answers with 4xx statuses,
    which the console expects, are left out)."""
    return [e["message"] for e in driver.get_log("browser")
            if "Failed to load resource" not in e["message"]]


@pytest.fixture
def alice(tmp_path, browser):
    """A console with an admin alice (password wonderland): its URL and a wire client."""
    auth = tmp_path / "console.auth"
    auth.write_text(f"user alice admin {cheap_hash('wonderland')}\n")
    server, base = _console(tmp_path, "--web-auth", str(auth))
    try:
        w = Wire(socket.create_connection(server.address, timeout=5))
        _script_errors(browser)
        yield base, w
        assert _script_errors(browser) == []
        w.sock.close()
    finally:
        server.stop()


def _log_in(browser):
    _wait(browser, lambda d: d.find_elements(By.ID, "login-user"))
    browser.find_element(By.ID, "login-user").send_keys("alice")
    browser.find_element(By.ID, "login-password").send_keys("wonderland")
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()


def _put(w, tube, bodies, pri=100):
    """Put ``bodies`` into ``tube``; their ids."""
    assert w.ask(b"use %s\r\n" % tube) == b"USING %s\r\n" % tube
    ids = []
    for body in bodies:
        ids.append(int(w.ask(b"put %d 0 120 %d\r\n%s\r\n" % (pri, len(body), body)).split()[1]))
    return ids


def _rect(driver, css):
    return driver.execute_script(
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left, right: r.right};",
        css)


def _hash(driver):
    return driver.execute_script("return location.hash")


def _fresh(browser, base, hash_=""):
    """Open the console logged out (the cookies of an earlier test dropped)."""
    browser.get(base)
    browser.delete_all_cookies()
    browser.get(base + hash_)


def test_tube_page_tools_above_the_table_search_selection_and_confirmed_delete(
        tmp_path, browser, alice):
    base, w = alice
    plain = _put(w, b"orders", [b"order %03d" % i for i in range(60)])
    wanted = _put(w, b"orders", [b"order needle %d" % i for i in range(3)] + [HTML_BODY])
    _fresh(browser, base, "#/tube/orders")
    _log_in(browser)
    _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == str(plain[0]))
    # The search box and every action form are above the table.
    table_top = _rect(browser, "#jobs")["top"]
    for css in ("#search-text", "#put-form", "#kick-bound", "#pause-seconds", "#flush-confirm"):
        assert _rect(browser, css)["bottom"] < table_top, css
    assert table_top < 900  # on the first screen of a 1280x900 window
    # Each put label stands just before its own input, on the same line.
    for input_id, label in (("put-encoding", "encoding"), ("put-pri", "priority"),
                            ("put-delay", "delay (s)"), ("put-ttr", "TTR (s)")):
        found = browser.execute_script(
            "const i = document.getElementById(arguments[0]); const l = i.labels[0];"
            "const t = l.querySelector('span').getBoundingClientRect();"
            "const r = i.getBoundingClientRect();"
            "return [l.querySelector('span').textContent, r.left - t.right,"
            "        Math.abs((t.top + t.bottom) / 2 - (r.top + r.bottom) / 2)];", input_id)
        assert found[0] == label and 0 <= found[1] < 12 and found[2] < 4, (input_id, found)

    # Search, select the results, plus one job of the list.
    browser.find_element(By.ID, "search-text").send_keys("needle")
    _click(browser, "#search-form button[type=submit]")
    _wait(browser, lambda d: _text(d, "#search-summary") == "3 matches; searched every job")
    assert _rect(browser, "#search-table")["bottom"] < _rect(browser, "#jobs")["top"]
    _click(browser, "#select-results")
    _click(browser, f'#jobs input[data-id="{plain[5]}"]')
    assert _text(browser, "#selected-count") == "4 jobs selected"
    _screenshot(browser, tmp_path, "tube-search.png")
    # Delete asks first and says how many; Cancel deletes nothing.
    _click(browser, "button[data-action=delete-selected]")
    assert _text(browser, "#confirm-delete") == "Delete 4 jobs? This cannot be undone."
    _click(browser, "button[data-action=cancel]")
    _wait(browser, lambda d: _text(d, "#selected-count") == "4 jobs selected")
    assert w.ask(b"stats-tube orders\r\n").count(b"current-jobs-ready: 64\n") == 1
    _click(browser, "button[data-action=delete-selected]")
    _click(browser, "button[data-action=confirm-delete]")
    _wait(browser, lambda d: (_text(d, "#notice") or "").startswith("Deleted 4 of 4 jobs (jobs "))
    named = _text(browser, "#notice")[len("Deleted 4 of 4 jobs (jobs "):-1].split(", ")
    assert sorted(map(int, named)) == sorted(wanted[:3] + [plain[5]])
    for job_id in wanted[:3] + [plain[5]]:
        assert w.ask(b"peek %d\r\n" % job_id) == b"NOT_FOUND\r\n"
    assert w.ask(b"peek %d\r\n" % wanted[3]).startswith(b"FOUND")
    _wait(browser, lambda d: _text(d, "#selected-count") == "0 jobs selected")
    _wait(browser, lambda d: _text(d, "#search-summary") == "0 matches; searched every job")
    # A search result is text, never markup.
    browser.find_element(By.ID, "search-text").clear()
    browser.find_element(By.ID, "search-text").send_keys("<script>")
    _click(browser, "#search-form button[type=submit]")
    _wait(browser, lambda d: _text(d, "#search-summary") == "1 match; searched every job")
    assert _text(browser, "#search-table td.preview") == HTML_BODY.decode()
    assert browser.find_elements(By.ID, "injected") == []


def test_links_carry_the_state_and_page_and_survive_the_login(tmp_path, browser, alice):
    base, w = alice
    ids = _put(w, b"thumbs", [b"thumb %d" % i for i in range(120)])
    for job_id in ids:
        w.send(b"reserve-job %d\r\nbury %d 5\r\n" % (job_id, job_id))
    for _ in ids:
        assert w.reply().startswith(b"RESERVED")
        assert w.reply() == b"BURIED\r\n"
    odd = "a/b(c)$;x"
    _put(w, odd.encode(), [b"odd"])

    # A deep link, logged out: the login, then that very page.
    _fresh(browser, base, "#/tube/thumbs/buried/3")
    _wait(browser, lambda d: d.find_elements(By.ID, "login-user"))
    assert _hash(browser) == "#/login?next=%2Ftube%2Fthumbs%2Fburied%2F3"
    _log_in(browser)
    _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == str(ids[100]))
    assert _hash(browser) == "#/tube/thumbs/buried/3"
    assert "101–120" in _text(browser, ".pager [data-range]")
    assert _text(browser, "#state-tabs a.active") == "buried (120)"

    # Pages and tabs change the address; Back goes back to the page before.
    _click(browser, ".pager button[data-page=prev]")
    _wait(browser, lambda d: _hash(d) == "#/tube/thumbs/buried/2")
    _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == str(ids[50]))
    _click(browser, '#state-tabs a[data-state="ready"]')
    _wait(browser, lambda d: _hash(d) == "#/tube/thumbs")
    # ("(0 ready)": the buried page's answer must not show under the ready tab.)
    _wait(browser, lambda d: "(0 ready)" in (_text(d, ".pager [data-range]") or ""))
    assert not browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
    browser.back()
    _wait(browser, lambda d: _text(d, "#jobs tbody tr td:nth-child(2)") == str(ids[50]))
    assert _text(browser, "#state-tabs a.active") == "buried (120)"
    # The sort is part of the address too.
    browser.find_element(By.CSS_SELECTOR, "#job-sort option[value=pri]").click()
    _wait(browser, lambda d: _hash(d) == "#/tube/thumbs/buried?sort=pri")
    # A tube whose name needs encoding, from the overview's link.
    browser.get(base + "#/")
    link = f'tr[data-tube="{odd}"] a'
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, link))
    _click(browser, link)
    _wait(browser, lambda d: _text(d, "#tube-name") == odd)
    assert _hash(browser) == "#/tube/a%2Fb(c)%24%3Bx"
    assert browser.title.startswith(f"Tube {odd} · ")


def test_job_page_json_hex_and_the_way_back(tmp_path, browser, alice):
    base, w = alice
    raw = b'{"id":12345678901234567890,"tags":["a","<b>"],"empty":{},"nested":{"ok":true}}'
    binary = bytes(range(0x3c, 0x3c + 20)) + b"\x00\xff\r\n"
    json_id, bin_id = _put(w, b"events", [raw, binary])
    page2 = _put(w, b"events", [b"filler %d" % i for i in range(60)])[-1]

    _fresh(browser, base, f"#/job/{json_id}")
    _log_in(browser)
    _wait(browser, lambda d: (_text(d, "#job-body") or "").startswith("{\n"))
    assert _text(browser, "#job-body") == (
        '{\n  "id": 12345678901234567890,\n  "tags": [\n    "a",\n    "<b>"\n  ],\n'
        '  "empty": {},\n  "nested": {\n    "ok": true\n  }\n}')
    assert "JSON" in _text(browser, "#job-detail h2")
    _click(browser, "button[data-view=text]")
    assert _text(browser, "#job-body") == raw.decode()
    _click(browser, "button[data-view=json]")
    assert _text(browser, "#job-body").startswith("{\n")
    _screenshot(browser, tmp_path, "job.png")
    back = browser.find_element(By.ID, "back")
    assert back.get_attribute("href").endswith("#/tube/events")
    assert back.text == "‹ Tube events"

    browser.get(base + f"#/job/{bin_id}")
    _wait(browser, lambda d: (_text(d, "#job-body") or "").startswith("00000000"))
    assert _text(browser, "#job-body").split("\n") == [
        "00000000  3c 3d 3e 3f 40 41 42 43  44 45 46 47 48 49 4a 4b  |<=>?@ABCDEFGHIJK|",
        "00000010  4c 4d 4e 4f 00 ff 0d 0a                           |LMNO....|"]
    assert "binary" in _text(browser, "#job-detail h2")
    assert browser.find_elements(By.CSS_SELECTOR, "#body-views button") == []

    # From page 2 of the tube's buried... here ready jobs, back to that page.
    browser.get(base + "#/tube/events/ready/2")
    row = f'#jobs tr[data-job="{page2}"] a'
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row))
    _click(browser, row)
    _wait(browser, lambda d: _text(d, '#job-stats dd[data-field="id"]') == str(page2))
    _click(browser, "#back")
    _wait(browser, lambda d: _hash(d) == "#/tube/events/ready/2")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row))

    # Delete from the job's page asks first, then goes back to where the job was.
    _click(browser, row)
    _click(browser, "#job-actions button[data-action=delete]")
    assert _text(browser, "#confirm-delete") == f"Delete job {page2}? This cannot be undone."
    _click(browser, "#job-actions button[data-action=cancel]")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#job-actions [data-action=bury]"))
    assert w.ask(b"peek %d\r\n" % page2).startswith(b"FOUND")
    _click(browser, "#job-actions button[data-action=delete]")
    _click(browser, "#job-actions button[data-action=confirm-delete]")
    _wait(browser, lambda d: _hash(d) == "#/tube/events/ready/2")
    assert w.ask(b"peek %d\r\n" % page2) == b"NOT_FOUND\r\n"


#: Makes the page see every successful ``jobs/delete`` as the server's "still
#: running" answer (202), as it gets one when the action outlasts its slice.
_DELETE_ANSWERS_STILL_RUNNING = """
const real = window.fetch;
window.fetch = async (url, options) => {
  const response = await real(url, options);
  if (!String(url).endsWith("/jobs/delete") || response.status !== 200) return response;
  const data = await response.json();
  data.task.state = "running";
  data.task.finished = null;
  return new Response(JSON.stringify(data),
                      { status: 202, headers: { "Content-Type": "application/json" } });
};
"""


def test_a_delete_that_ends_after_its_answer_still_goes_back(tmp_path, browser, alice):
    """A loaded server answers a job's delete with "still running" (202) when
    the action outlasts its few-millisecond slice; the job page used to stay
    on the deleted job.  It follows the task and goes back when it ends."""
    base, w = alice
    job_id = _put(w, b"slow", [b"one"])[0]
    _fresh(browser, base, f"#/job/{job_id}")
    _log_in(browser)
    _wait(browser, lambda d: _text(d, '#job-stats dd[data-field="id"]') == str(job_id))
    browser.execute_script(_DELETE_ANSWERS_STILL_RUNNING)
    _click(browser, "#job-actions button[data-action=delete]")
    _click(browser, "#job-actions button[data-action=confirm-delete]")
    _wait(browser, lambda d: _hash(d) == "#/tube/slow")
    assert w.ask(b"peek %d\r\n" % job_id) == b"NOT_FOUND\r\n"


def test_overview_host_charts_plurals_and_a_400px_window(tmp_path, browser, alice):
    base, w = alice
    job_id = _put(w, b"emails", [b"x" * 300 + b" " + HTML_BODY])[0]
    _put(w, b"a-tube-with-a-rather-long-name-0123456789", [b"y"])
    assert w.ask(b"watch emails\r\n") == b"WATCHING 2\r\n"
    assert w.ask(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED %d " % job_id)
    host = socket.gethostname()
    _fresh(browser, base)
    _log_in(browser)
    ready = 'tr[data-tube="emails"] td[data-col="ready"]'
    _wait(browser, lambda d: _text(d, ready) == "0")
    assert _text(browser, "#host") == host
    assert browser.title == f"Overview · {host} · twisted-stalk"
    assert _text(browser, '#server-facts dd[data-fact="connections"]') == (
        "1 (1 producer, 1 worker, 0 waiting)")
    assert "(3 of 3 tubes)" in _text(browser, ".pager [data-range]")
    # The charts have a y-axis from 0, with their unit.
    chart = "#server-chart svg"
    assert browser.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' text.tick')]"
        ".map((t) => t.textContent).slice(0, 3)", chart) == ["0", "0.5", "1"]
    assert browser.execute_script(
        "return document.querySelector(arguments[0] + ' text.unit').textContent",
        chart) == "commands/s"
    assert len(browser.find_elements(By.CSS_SELECTOR, chart + " line.axis")) == 2
    spark = 'tr[data-tube="emails"] svg.chart'
    assert browser.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' text.tick')]"
        ".map((t) => t.textContent).slice(0, 2)", spark) == ["0", "1/s"]

    assert not browser.find_element(By.ID, "tube-sort").is_displayed()  # the headings sort

    # At 400 px: nothing wider than the window, every count readable.
    browser.set_window_size(400, 900)
    try:
        width = browser.execute_script("return innerWidth")
        assert width <= 400
        overflow = "return document.documentElement.scrollWidth - innerWidth"
        _wait(browser, lambda d: _text(d, ready) == "0")
        assert browser.execute_script(overflow) <= 0
        cell = _rect(browser, ready)
        assert 0 <= cell["left"] and cell["right"] <= width
        assert browser.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0]), '::before')"
            ".content", ready) == '"Ready"'
        # No headings to click: a menu sorts instead.
        assert not browser.find_element(By.CSS_SELECTOR, "#tubes thead").is_displayed()
        browser.find_element(By.CSS_SELECTOR, "#tube-sort option[value=reserved]").click()
        _wait(browser, lambda d: _text(d, "#tubes tbody tr td.name") == "emails")
        browser.execute_script("document.getElementById('tubes').scrollIntoView()")
        _screenshot(browser, tmp_path, "overview-400px.png")
        for page, shown, name in (
                ("#/tube/emails/reserved", "#jobs tbody tr", "tube"),
                (f"#/job/{job_id}", "#job-body", "job"),
                ("#/connections", "#connections tbody tr", "connections")):
            browser.get(base + page)
            _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, shown))
            assert browser.execute_script(overflow) <= 0, page
            browser.execute_script(
                "document.querySelector(arguments[0]).scrollIntoView()", shown)
            _screenshot(browser, tmp_path, f"{name}-400px.png")
    finally:
        browser.set_window_size(1280, 900)


def test_the_put_forms_priority_shows_every_digit_at_1280_and_400px(tmp_path, browser, alice):
    """The priority field showed ``214748364`` for the default
    2147483648.  The input's value as displayed: its text fits the field (no
    scrolling inside it), for the default and for the largest priority."""
    base, w = alice
    _put(w, b"emails", [b"x"])
    _fresh(browser, base, "#/tube/emails")
    _log_in(browser)
    _wait(browser, lambda d: d.find_elements(By.ID, "put-pri"))
    shown = ("const i = document.getElementById('put-pri');"
             "if (arguments[0] !== null) i.value = arguments[0];"
             "const r = i.getBoundingClientRect();"
             "return {value: i.value, scroll: i.scrollWidth, client: i.clientWidth,"
             "        right: r.right, window: innerWidth};")
    try:
        for width in (1280, 400):
            browser.set_window_size(width, 900)
            browser.refresh()  # the form as drawn at this width, with the default
            _wait(browser, lambda d: d.find_elements(By.ID, "put-pri"))
            assert browser.execute_script("return innerWidth") <= width
            for value in (None, "4294967295", "1"):
                field = browser.execute_script(shown, value)
                assert field["value"] == (value or "2147483648"), field
                assert field["scroll"] <= field["client"], (width, field)
                assert field["right"] <= field["window"], (width, field)
    finally:
        browser.set_window_size(1280, 900)


def test_a_person_added_while_the_server_runs_logs_in_from_the_browser(tmp_path, browser):
    """After docs/deploy.md only a bearer token existed, and a person
    added with the credentials tool could log in only after a restart.  Now:
    the tool, then SIGHUP (systemctl reload), then the login page."""
    import signal
    import subprocess
    import sys
    auth = tmp_path / "console.auth"
    tool = [sys.executable, "-m", "twisted_stalk.web.auth"]
    assert subprocess.run([*tool, "token", "deploy", "--file", str(auth)], capture_output=True,
                          timeout=60).returncode == 0
    server, base = _console(tmp_path, "--web-auth", str(auth))
    try:
        _fresh(browser, base)
        _log_in(browser)  # alice, not in the file yet
        _wait(browser, lambda d: "wrong user name or password" in (_text(d, "#alert") or ""))
        assert subprocess.run([*tool, "add", "alice", "--file", str(auth)], input=b"wonderland\n",
                              capture_output=True, timeout=60).returncode == 0
        server.proc.send_signal(signal.SIGHUP)
        server.wait_log("credentials reloaded")
        _fresh(browser, base)
        _log_in(browser)
        _wait(browser, lambda d: "alice (admin)" in (_text(d, "#who") or ""))
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#tubes tbody tr"))
        _script_errors(browser)  # the failed login's 401
    finally:
        server.stop()
