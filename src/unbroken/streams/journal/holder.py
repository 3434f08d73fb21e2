"""Who holds a producer lease: this process's identity, and whether another holder is known dead.

A lease names its owner. The owner id carries where the process runs and which process it is:
``<kind>_<random>@<host>/<pid>/<start>``, ``<host>`` a hash of the host name, the kernel's boot
id and the process's pid namespace (so two containers that share a host name and a journal are
told apart), ``<start>`` the process's start time in clock ticks since boot (``/proc``; empty
where there is no ``/proc``). A process that opens the journal can then tell, for a lease of
its own host, that the holder is gone: no such pid, or a pid reused by a process that started
at another time. Its streams are recovered at once instead of after the lease runs out. A
holder of another host, or an owner id without this form (an older proxy), is never judged:
its lease rule stands. Reading ``/proc`` is a few microseconds; nothing here blocks.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
from pathlib import Path
from typing import Final

__all__ = ["known_dead", "local_pid", "new_owner"]

_PROC: Final = Path("/proc")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str | None:
    """The process's start time (field 22 of ``/proc/<pid>/stat``); ``None`` if there is no
    such process (or it exited), ``""`` if this system does not tell."""
    if not _PROC.is_dir():
        return ""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat.rpartition(")")[2].split()
    if fields and fields[0] in ("Z", "X"):
        return None  # exited (a zombie until its parent reaps it)
    return fields[19] if len(fields) > 19 else ""


def _host() -> str:
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    boot = _read(_PROC / "sys" / "kernel" / "random" / "boot_id")
    seen = f"{socket.gethostname()}\x00{boot}\x00{namespace}".encode()
    return hashlib.sha256(seen).hexdigest()[:16]


_HOST: Final = _host()


def new_owner(kind: str = "proxy") -> str:
    """A fresh owner id for this process's leases (``kind``: who holds them, e.g. ``proxy``)."""
    pid = os.getpid()
    return f"{kind}_{secrets.token_hex(8)}@{_HOST}/{pid}/{_start_ticks(pid) or ''}"


def known_dead(owner: str) -> bool:
    """Whether the process that holds leases as ``owner`` is known to be gone: it ran on this
    host and its pid is free or belongs to a process started at another time. ``False`` when
    it may be alive or cannot be judged (another host, an owner id of an older proxy)."""
    _name, at, where = owner.rpartition("@")
    host, _, rest = where.partition("/")
    pid_text, _, start = rest.partition("/")
    if not at or host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    now = _start_ticks(pid)
    if now is None:
        return True  # no such process
    if now and start:
        return now != start  # the pid was reused by another process
    try:
        os.kill(pid, 0)  # no /proc: whether the pid exists at all
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def local_pid(owner: str) -> int | None:
    """The pid of the process holding leases as ``owner``, if it runs on this host (so this
    process can reach it, e.g. by a Unix socket); ``None`` otherwise."""
    _name, at, where = owner.rpartition("@")
    host, _, rest = where.partition("/")
    pid_text = rest.partition("/")[0]
    if not at or host != _HOST or not pid_text.isdigit():
        return None
    return int(pid_text)
