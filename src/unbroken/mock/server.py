"""Serve the mock under uvicorn."""

from __future__ import annotations

import uvicorn

from .app import create_app

__all__ = ["serve"]


def serve(host: str = "127.0.0.1", port: int = 8100) -> None:
    """Serve a fresh mock on ``host:port`` until interrupted."""
    uvicorn.run(create_app(), host=host, port=port, log_level="warning")
