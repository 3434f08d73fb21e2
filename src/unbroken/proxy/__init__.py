"""The resumable proxy: one upstream generation, any number of downstream reconnects.

``create_app(ProxyConfig(...))`` is the ASGI app (Starlette); ``python -m unbroken.proxy`` runs it
under uvicorn. See ``app.py`` for the routes, ``unbroken.streams.journal`` for what is stored,
``upstream.py`` for the task that reads each upstream once, and ``wire.py`` for the bytes sent
downstream.
"""

from .app import ProxyApp, create_app
from .config import ProxyConfig, parse_duration

__all__ = ["ProxyApp", "ProxyConfig", "create_app", "parse_duration"]
