"""Worker: send the e-mails queued by producer.py, four at a time.

    python docs/examples/worker.py tcp:127.0.0.1:11300

Success deletes the job; a temporary failure releases it with backoff (buried
after 3 retries); any other error buries it.  Ctrl-C stops gracefully: jobs in
hand get 30 s to finish, then they are released.
"""
import sys
from typing import Any, Awaitable, Callable, Dict

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater, react

from twisted_stalk.client import BeanstalkClient, Job, JSONCodec, Retry, Worker


class TemporaryFailure(Exception):
    """The mail server said "try again later"."""


Sender = Callable[[Dict[str, Any]], Awaitable[None]]


def make_worker(client: BeanstalkClient, send: Sender) -> Worker:
    async def handle(job: Job) -> None:
        try:
            await send(job.value)
        except TemporaryFailure as e:
            raise Retry(str(e))  # release; the worker picks the delay

    return Worker(client, handle, tubes=["emails"], concurrency=4, max_retries=3)


def main(reactor, endpoint: str = "tcp:127.0.0.1:11300") -> Deferred:
    client = BeanstalkClient(endpoint, reactor=reactor, codec=JSONCodec())

    async def send(message: Dict[str, Any]) -> None:
        await deferLater(reactor, 0.1, lambda: None)  # talk to the mail server here
        print("sent", message)

    worker = make_worker(client, send)
    worker.start()

    async def shutdown() -> None:
        await worker.stop(timeout=30)
        await client.close()
    reactor.addSystemEventTrigger("before", "shutdown",
                                  lambda: Deferred.fromCoroutine(shutdown()))
    return Deferred()  # run until Ctrl-C


if __name__ == "__main__":
    react(main, sys.argv[1:])
