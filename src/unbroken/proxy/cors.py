"""The proxy's CORS: which pages of other origins may call it, and how.

Off unless ``ProxyConfig.cors_origins`` names origins. Starlette's ``CORSMiddleware`` then
answers preflights itself (they never reach a route, so nothing goes upstream) and adds CORS
headers to every response for those origins, the 204 that stops an ``EventSource`` and the
404s included.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from ..resumption import STREAM_ID_HEADER, STREAM_TOKEN_HEADER

__all__ = ["SERVED_METHODS", "CORSStarlette", "cors_options"]

# What the proxy serves, and so what a page of an allowed origin may call (DELETE a response too).
SERVED_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def cors_options(origins: tuple[str, ...]) -> dict[str, Any] | None:
    """``CORSMiddleware``'s options for ``origins``; ``None`` (no CORS) when there are none."""
    if not origins:
        return None
    return {
        "allow_origins": origins,
        "allow_methods": SERVED_METHODS,
        # Mirrors the headers a preflight asks for: the credentials (authorization,
        # x-api-key, x-goog-api-key), last-event-id, idempotency-key, unbroken-*, and the
        # SDKs' own (anthropic-version, x-stainless-*, ...), which are passed upstream.
        "allow_headers": ["*"],
        "expose_headers": [STREAM_ID_HEADER, STREAM_TOKEN_HEADER],
        # A reader is authorized by a header or ?token=, never a cookie; without
        # credentials a page cannot ride on a user's ambient session, and "*" stays valid.
        "allow_credentials": False,
        "max_age": 600,
    }


class CORSStarlette(Starlette):
    """Starlette with CORS, when configured, outside even its error handler: Starlette puts
    user middleware inside ``ServerErrorMiddleware``, so a 500 would reach a page of an allowed
    origin as an unreadable CORS failure instead of a status it can show."""

    def __init__(self, *, cors: dict[str, Any] | None, **options: Any) -> None:
        self._cors = cors
        super().__init__(**options)

    def build_middleware_stack(self) -> ASGIApp:
        app = super().build_middleware_stack()
        return app if self._cors is None else CORSMiddleware(app, **self._cors)
