"""Resumable streams for an app's own endpoints (FastAPI, Starlette, any ASGI app).

``ResumableStreams(store)`` (``resumable.py``) starts a stream from any async iterable and
produces it in a task of its own; ``response`` serves it as SSE with ids ``<stream_id>:<seq>``
from any ``Last-Event-ID``; ``cancel`` and ``get``; ``app`` to mount. What values become on the
wire: ``frames.py``; the producer and the end states: ``producer.py``; owners and tokens:
``access.py``; the statuses a response answers with: ``responses.py``. The journal, leases,
recovery and access are the stream engine's (``unbroken.streams``), shared with the proxy:
one journal holds both kinds.
"""

from __future__ import annotations

from ..errors import (
    FrameLimitError,
    StreamNotFoundError,
    StreamRefusedError,
    UnsupportedValueError,
)
from .resumable import ResumableStreams, StreamHandle

__all__ = [
    "FrameLimitError",
    "ResumableStreams",
    "StreamHandle",
    "StreamNotFoundError",
    "StreamRefusedError",
    "UnsupportedValueError",
]
