"""The examples of docs/client.md (docs/examples/*.py) run against the in-memory server."""
import importlib.util
import os

from twisted.internet.defer import Deferred

from twisted_stalk.client import JSONCodec
from twisted_stalk.testing import MemoryBeanstalk

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "examples")


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_producer_and_worker():
    producer, worker_example = load("producer"), load("worker")
    server = MemoryBeanstalk()
    client = server.client(codec=JSONCodec())

    d = Deferred.fromCoroutine(producer.produce(client, ["ok@x", "later@x", "broken@x"]))
    ids = server.result(d)
    assert ids == [1, 2, 3]
    assert server.stats_tube("emails")["current-jobs-ready"] == 3
    assert client.used == "default"

    sent = []

    async def send(message):
        if message["to"] == "later@x":
            raise worker_example.TemporaryFailure("421 try again")
        if message["to"] == "broken@x":
            raise KeyError("no such mailbox")
        sent.append(message)

    worker = worker_example.make_worker(client, send)
    worker.start()
    server.flush()
    assert sent == [{"to": "ok@x", "subject": "Welcome!"}]
    assert server.stats_job(1) == {}                       # deleted
    assert server.stats_job(2)["state"] == "delayed"       # released with backoff
    assert server.stats_job(3)["state"] == "buried"        # buried
    server.advance(100)
    assert server.stats_job(2)["state"] == "buried"        # out of retries
    assert server.stats_job(2)["reserves"] == 4
    server.result(worker.stop())
    server.close()


def test_testing_module_example():
    # the snippet from the twisted_stalk.testing docstring and docs/client.md
    server = MemoryBeanstalk()
    client = server.client()
    d = client.tube("emails").put(b"hello")
    server.flush()
    assert server.stats_tube("emails")["current-jobs-ready"] == 1
    assert server.result(d) == 1
    job = server.result(client.watching("emails").reserve(timeout=0))
    server.result(job.delete())
    server.close()
