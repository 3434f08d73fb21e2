"""``DeadlineTimes``: the moments a stream's deadlines count from, and the deadline due next.

``StreamSession`` decides what a stream does next (resume, retry, give up); this only answers
"when does it time out, and with which error". It is apart because these times move on their own
schedule (each request, each content frame, each read, each pause of the caller) and touch no
other state of the session. No clock is read: every ``now`` is the driver's.
"""

from __future__ import annotations

from ..errors import StreamTimeout
from .policy import Deadlines

__all__ = ["DeadlineTimes"]


class DeadlineTimes:
    """``started`` fixes the total deadline; ``connection_started`` the first-event one (set by
    ``connecting()``; the idle one never counts from before it), ``last_content`` the idle one
    (None until a content frame of this generation came), ``read_end`` when the last read was
    taken in."""

    __slots__ = ("connection_started", "deadlines", "last_content", "read_end", "started")

    def __init__(self, deadlines: Deadlines, started: float) -> None:
        self.deadlines = deadlines
        self.started = started
        self.connection_started = started
        self.last_content: float | None = None
        self.read_end: float | None = None

    def connecting(self, now: float) -> None:
        """A request goes out: the first-event deadline counts from now."""
        self.connection_started = now

    def reading(self, now: float) -> None:
        """The driver is about to wait for bytes. The time the caller spent since the last read
        is not the server's silence: the content deadlines (not the total one) move by it."""
        end = self.read_end
        if end is not None and now > end:
            paused = now - end
            self.connection_started += paused
            if self.last_content is not None:
                self.last_content += paused
        self.read_end = None

    def socket_read_timeout(self) -> float | None:
        """The longest a single read may block: the larger content deadline, capped by the
        total one."""
        parts = [d for d in (self.deadlines.first_event, self.deadlines.idle) if d is not None]
        timeout = max(parts) if parts else None
        if self.deadlines.total is not None:
            total = self.deadlines.total
            timeout = total if timeout is None else min(timeout, total)
        return timeout

    def time_left(self, now: float) -> float | None:
        """Seconds until the nearest deadline, or None when none applies."""
        due = self.due()
        return None if due is None else max(0.0, due[0] - now)

    def next_deadline(self) -> float | None:
        """When the nearest deadline passes, or None."""
        due = self.due()
        return None if due is None else due[0]

    def overdue(self) -> StreamTimeout | None:
        """The deadline that applies now, passed or not (to name a socket timeout)."""
        due = self.due()
        return None if due is None else self.deadlines.error(due[1])

    def check(self, now: float) -> None:
        """Raise the ``StreamTimeout`` of the nearest deadline if it has passed at ``now``."""
        due = self.due()
        if due is not None and now >= due[0]:
            raise self.deadlines.error(due[1])

    def due(self) -> tuple[float, str] | None:
        """The nearest deadline: (when, which). Called after every read, so it builds no error."""
        d = self.deadlines
        due: tuple[float, str] | None = None
        if d.total is not None:
            due = (self.started + d.total, "total")
        if self.last_content is None:
            if d.first_event is not None:
                when = self.connection_started + d.first_event
                if due is None or when < due[0]:
                    due = (when, "first_event")
        elif d.idle is not None:
            when = max(self.last_content, self.connection_started) + d.idle
            if due is None or when < due[0]:
                due = (when, "idle")
        return due
