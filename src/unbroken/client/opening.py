"""What ``stream`` and ``astream`` share before any I/O: the request body and the session."""

from __future__ import annotations

import json as jsonlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import telemetry
from ..dialects import find_dialect
from .capture import CaptureWriter
from .policy import Deadlines, ResumeMode, Retry
from .session import StreamSession

__all__ = ["open_session", "request_body"]


def request_body(
    json: Any, content: bytes | None, headers: Mapping[str, str] | None
) -> tuple[bytes | None, dict[str, str]]:
    """The body bytes and headers of every attempt (the same bytes each time)."""
    if json is not None and content is not None:
        raise ValueError("pass json= or content=, not both")
    all_headers = {k.lower(): v for k, v in (headers or {}).items()}
    # Frames must be parseable as they arrive: no compressed bodies.
    all_headers.setdefault("accept-encoding", "identity")
    if json is None:
        return content, all_headers
    all_headers.setdefault("content-type", "application/json")
    return jsonlib.dumps(json, ensure_ascii=False).encode("utf-8"), all_headers


def open_session(
    method: str,
    url: str,
    *,
    dialect: str,
    json: Any,
    content: bytes | None,
    headers: Mapping[str, str] | None,
    retry: Retry | None,
    resume: ResumeMode,
    connect_timeout: float | None,
    first_event_timeout: float | None,
    idle_timeout: float | None,
    total_timeout: float | None,
    capture: str | Path | None,
    trace: bool,
) -> StreamSession:
    """A session for one logical stream; the capture file, if any, is opened here."""
    body, all_headers = request_body(json, content, headers)
    started = time.monotonic()
    writer = (
        CaptureWriter(capture, method=method, url=url, dialect=dialect, started=time.time())
        if capture is not None
        else None
    )
    observation = telemetry.observe("client", dialect=find_dialect(dialect), url=url, body=body,
                                    started=started)
    if observation is not None:
        for name, value in observation.trace_headers().items():
            all_headers.setdefault(name, value)
    return StreamSession(
        method,
        url,
        dialect=dialect,
        content=body,
        headers=all_headers,
        retry=retry or Retry(),
        resume=resume,
        deadlines=Deadlines(
            connect=connect_timeout,
            first_event=first_event_timeout,
            idle=idle_timeout,
            total=total_timeout,
        ),
        trace=trace,
        started=started,
        capture=writer,
        observation=observation,
    )
