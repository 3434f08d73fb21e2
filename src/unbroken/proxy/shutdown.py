"""Serving under uvicorn with a graceful drain on SIGTERM (and SIGINT).

uvicorn, on the signal, stops accepting connections, asks idle keep-alive connections to close,
waits for running responses up to its graceful timeout, then runs the lifespan's shutdown.
``DrainingServer`` also tells the proxy at the moment the signal arrives, so that the drain
clock starts then: new streams are refused (503), live ones get ``shutdown_grace`` seconds to
finish, and the rest are stopped and marked ``interrupted`` with their error frame, which their
readers still receive before uvicorn's own timeout (set a little later) closes anything left.
"""

from __future__ import annotations

import gc
import socket
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette

from ..streams.logs import log_config
from .request_head import BoundedHeadProtocol

if TYPE_CHECKING:
    from .app import ProxyApp

__all__ = ["FLUSH_MARGIN_S", "DrainingServer", "freeze_startup_heap", "serve"]

FLUSH_MARGIN_S = 2.0  # after the grace: time for the last error frames to reach readers


class DrainingServer(uvicorn.Server):
    """A uvicorn server that starts the proxy's drain when a shutdown signal arrives."""

    def __init__(self, config: uvicorn.Config, proxy: ProxyApp) -> None:
        super().__init__(config)
        self.proxy = proxy

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.proxy.begin_drain_threadsafe()
        super().handle_exit(sig, frame)


def serve(app: Starlette, *, host: str, port: int, log_level: str,
          sockets: list[socket.socket] | None = None) -> None:
    """Run the proxy app until a signal, then drain it; ``sockets``: listen on these (bound
    by the parent of ``--workers``) instead of ``host:port``."""
    proxy: ProxyApp = app.state.proxy
    config = proxy.config
    server_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config(log_level),
        timeout_graceful_shutdown=int(config.shutdown_grace + FLUSH_MARGIN_S + 0.999),
        timeout_keep_alive=max(1, round(config.idle_close)),
        http=BoundedHeadProtocol,
    )
    freeze_startup_heap()
    DrainingServer(server_config, proxy).run(sockets=sockets)


def freeze_startup_heap() -> None:
    """Move what exists before serving (modules, the app) out of the collector's way.

    It lives as long as the process; left in place, every full collection walks all of it and
    stalls every stream (30-35 ms per pass under load, benchmarks/README.md). Done by the
    ``unbroken proxy`` command only: an app that embeds ``create_app`` owns its own heap.
    """
    gc.collect()
    gc.freeze()
