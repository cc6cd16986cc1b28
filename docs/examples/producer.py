"""Producer: queue e-mails as JSON jobs in the "emails" tube.

    python docs/examples/producer.py tcp:127.0.0.1:11300 a@example.com b@example.com
"""
import sys
from typing import List

from twisted.internet.defer import ensureDeferred
from twisted.internet.task import react

from twisted_stalk.client import BeanstalkClient, JSONCodec


async def produce(client: BeanstalkClient, recipients: List[str]) -> List[int]:
    """Put one job per recipient; return the job ids."""
    emails = client.tube("emails")  # targets "emails" without changing client.used
    ids = []
    for to in recipients:
        ids.append(await emails.put({"to": to, "subject": "Welcome!"}, ttr=60))
    return ids


async def main(reactor, endpoint: str = "tcp:127.0.0.1:11300", *recipients: str) -> None:
    client = BeanstalkClient(endpoint, reactor=reactor, codec=JSONCodec())
    try:
        ids = await produce(client, list(recipients) or ["someone@example.com"])
        print("queued jobs", ids)
    finally:
        await client.close()


if __name__ == "__main__":
    react(lambda reactor: ensureDeferred(main(reactor, *sys.argv[1:])))
