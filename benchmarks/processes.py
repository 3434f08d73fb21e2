"""What the network benchmarks read of the processes they start: CPU time, resident memory, a
free port, and the percentile they report (``proxy.py`` and ``server.py`` share these)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["cpu_seconds", "free_port", "percentile", "rss_bytes"]

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process so far, all its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_bytes(pid: int) -> int:
    """The process's resident memory."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(ordered: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of values sorted ascending; NaN for none."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]
