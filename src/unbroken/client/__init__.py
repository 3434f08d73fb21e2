"""The streaming client over httpx2: deadlines, safe retries, verified resumes, captures."""

from .aio import AsyncStream, astream
from .capture import Capture, CaptureWriter, read_capture, replay_capture
from .policy import Deadlines, ResumeMode, Retry
from .sync import Stream, stream

__all__ = [
    "AsyncStream",
    "Capture",
    "CaptureWriter",
    "Deadlines",
    "ResumeMode",
    "Retry",
    "Stream",
    "astream",
    "read_capture",
    "replay_capture",
    "stream",
]
