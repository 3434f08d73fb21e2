"""The browser side: ``unbroken.js`` (one ES module, no build step) and the demo chat page.

Both are package data, served as they are: the proxy serves the module at ``SCRIPT_PATH``;
``unbroken.server`` mounts ``script_response`` at the same path; ``unbroken demo --web`` serves
the page (``with_demo_page``) in front of a proxy.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["DEMO_PATHS", "SCRIPT_PATH", "demo_page", "script", "script_response",
           "with_demo_page"]

SCRIPT_PATH = "/unbroken.js"
DEMO_PATHS = frozenset({"/", "/demo"})


@cache
def script() -> bytes:
    """The bytes of ``unbroken.js``."""
    return files(__package__).joinpath("unbroken.js").read_bytes()


@cache
def demo_page() -> str:
    """The demo chat page: it imports ``unbroken.js`` from its proxy (``?proxy=``, else its
    own origin)."""
    return files(__package__).joinpath("demo.html").read_text(encoding="utf-8")


async def script_response(request: Request) -> Response:
    # no-cache: a browser revalidates, so a new release's module is never mixed with an old page
    return Response(script(), media_type="text/javascript; charset=utf-8",
                    headers={"cache-control": "no-cache"})


def with_demo_page(app: ASGIApp) -> ASGIApp:
    """``app`` with the demo page at ``GET /`` and ``GET /demo``; everything else goes on."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and (
            scope["path"] in DEMO_PATHS
        ):
            await HTMLResponse(demo_page(), headers={"cache-control": "no-cache"})(
                scope, receive, send)
            return
        await app(scope, receive, send)

    return serve
