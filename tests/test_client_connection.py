"""The client's connection life: reconnect jitter, quiet factories, connect and
disconnect hooks, what the server reports, any command by name (in memory)."""
import pytest
from twisted.logger import globalLogPublisher

from twisted_stalk.client import (
    DEFAULT_RETRY_POLICY,
    BeanstalkClientFactory,
    InvalidArgument,
)
from twisted_stalk.testing import MemoryBeanstalk


@pytest.fixture
def server():
    s = MemoryBeanstalk()
    yield s
    s.close()


def test_default_reconnect_delays_have_jitter():
    """Clients cut off by one restart must not reconnect in lockstep."""
    delays = [DEFAULT_RETRY_POLICY(3) for _ in range(50)]
    assert len(set(delays)) > 40
    top = 0.1 * 1.5 ** 3
    assert all(top * 0.5 <= d <= top for d in delays)
    assert all(DEFAULT_RETRY_POLICY(100) <= 10.0 for _ in range(20))


def test_factory_does_not_log_every_connection():
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        factory = BeanstalkClientFactory()
        for _ in range(3):  # what each (re)connection does
            factory.doStart()
            factory.doStop()
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert not [e for e in events if "factory" in str(e.get("log_format", ""))]


def test_connect_and_disconnect_hooks(server):
    seen = []
    client = server.client(
        connect=False,
        on_connect=lambda c, again: seen.append(("up", c, again)),
        on_disconnect=lambda c, why: seen.append(("down", c, why)))
    server.result(client.connect())
    server.drop_connections()
    server.advance(1)
    assert [s[:2] for s in seen] == [("up", client), ("down", client), ("up", client)]
    assert [s[2] for s in seen if s[0] == "up"] == [False, True]
    assert "lost" in seen[1][2] or "closed" in seen[1][2]
    server.result(client.close())
    assert len(seen) == 3  # closing is not a disconnect to report


def test_hook_errors_are_logged_not_raised(server):
    def broken(client, again):
        raise RuntimeError("oops")
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        client = server.client(on_connect=broken)
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert client.connected
    assert any(e.get("log_failure") is not None for e in events)


def test_list_tube_used_shows_what_the_server_has(server):
    """It used to send ``use <default>`` first, so it could only show the default."""
    client = server.client()
    server.result(client.tube("other").put(b"x"))
    assert server.result(client.list_tube_used()) == "other"
    assert client.used == "default"
    assert server.result(client.list_tubes_watched()) == ["default"]


def test_any_command_by_name(server):
    client = server.client()
    server.result(client.tube("emails").put(b"hello"))
    reply = server.result(client.command("stats-tube", "emails"))
    assert reply.ok and reply.value["current-jobs-ready"] == 1
    reply = server.result(client.command("peek", 99))
    assert not reply.ok and reply.word == "NOT_FOUND"
    reply = server.result(client.command("use", "other"))
    assert reply.value == "other" and client.protocol.using == "other"
    reply = server.result(client.command("put", 5, 0, 60, body=b"raw"))
    assert reply.ok and server.stats_tube("other")["current-jobs-ready"] == 1
    for bad in (client.command("stats-tube", "bad name"), client.command("nosuch"),
                client.command("reserve"), client.command("put", 1, 2, 3)):
        with pytest.raises(InvalidArgument):
            server.result(bad)
