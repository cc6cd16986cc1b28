# -*- test-case-name: tests.test_web_api -*-
"""The console's site: the page and its assets, and ``/api/v1/``.

The page is three files of this package (``static/``), read once at start
and served from memory: ``/`` is ``index.html``, ``/static/<name>`` the
script and style sheet.  Nothing is fetched from anywhere else.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from .api import ApiResource
from .auth import Credentials
from .console import Console
from .http import ConsoleSite, send_json

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}


def load_assets(directory: str = STATIC_DIR) -> Dict[str, Tuple[bytes, bytes]]:
    assets = {}
    for name in sorted(os.listdir(directory)):
        kind = _TYPES.get(os.path.splitext(name)[1])
        if kind is not None:
            with open(os.path.join(directory, name), "rb") as f:
                assets[name] = (kind, f.read())
    return assets


class Asset(Resource):
    isLeaf = True

    def __init__(self, content_type: bytes, data: bytes) -> None:
        super().__init__()
        self.content_type = content_type
        self.data = data

    def render_GET(self, request) -> bytes:
        request.setHeader(b"content-type", self.content_type)
        return self.data

    render_HEAD = render_GET


class NotFoundPage(Resource):
    isLeaf = True

    def render(self, request):
        send_json(request, 404, {"error": "not found"})
        return NOT_DONE_YET  # send_json has finished the request


class Static(Resource):
    def __init__(self, assets: Dict[str, Tuple[bytes, bytes]]) -> None:
        super().__init__()
        for name, (kind, data) in assets.items():
            self.putChild(name.encode(), Asset(kind, data))

    def getChild(self, path, request):
        return NotFoundPage()


class Root(Resource):
    def __init__(self, console: Console, assets: Dict[str, Tuple[bytes, bytes]]) -> None:
        super().__init__()
        self.index = Asset(*assets["index.html"])
        self.putChild(b"static", Static(assets))
        api = Resource()
        api.putChild(b"v1", ApiResource(console))
        self.putChild(b"api", api)

    def getChild(self, path, request):
        if path == b"":
            return self.index
        return NotFoundPage()


def request_limit(max_job_size: int) -> int:
    """The largest request body: a job body written as JSON text, with room."""
    return min(64 * 1024 * 1024, 6 * max_job_size + 64 * 1024)


def make_site(factory, reactor, credentials: Optional[Credentials] = None,
              **console_options) -> ConsoleSite:
    """The console's site for ``factory``'s engine (``site.console`` holds its
    state; call ``site.console.start()`` to start the rate sampler)."""
    console = Console(factory, reactor, credentials, **console_options)
    site = ConsoleSite(Root(console, load_assets()), reactor,
                       max_body=request_limit(factory.engine.max_job_size))
    site.console = console  # type: ignore[attr-defined]
    return site


__all__ = ["Root", "STATIC_DIR", "load_assets", "make_site", "request_limit"]
