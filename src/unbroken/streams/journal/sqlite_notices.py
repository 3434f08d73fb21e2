"""``CommitNotices``: the processes writing one SQLite file tell each other what landed.

SQLite wakes no one, so each process that opens the journal also listens on a Unix socket named
for the file and its pid (``address``; abstract on Linux, where only the same user may connect,
checked by ``SO_PEERCRED``). A process whose reader follows a stream another process produces
(the pid is in the stream's lease, ``holder.py``) connects to that one and asks to watch the
stream; the producer answers at once (so a commit between the reader's read and the watch is
not missed), then after each group commit that landed frames of the stream, and when the stream
ends or stops being live there. The reader's process wakes that stream's readers, which read
the new frames from the file. Lines, one per notice::

    reader -> producer   +<id>  watch     -<id>  stop watching     x<id>  cancel it
    producer -> reader   =<id>  watching  ~<id>  frames landed     !<id>  ended / not live here

A producer with no watchers pays one dict test per commit. A peer whose unread notices pass
``MAX_BUFFERED`` bytes is dropped; so is a link whose producer dies: its reader then sees the
link lost and looks at the producer's lease at once (a dead holder's streams are recovered
without waiting for the lease). A notice that never comes costs a reader ``orphan_check``
seconds, when it reads the file again anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import struct
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Final

from .records import FrameRecord, StreamState

__all__ = ["MAX_BUFFERED", "CommitNotices", "Link", "NoticeWatch", "Watched", "address"]

MAX_BUFFERED: Final = 1 << 20  # bytes of notices a slow peer may leave unread
_MAX_LINE: Final = 1024  # a stream id is at most 128 characters
_CONNECT_S: Final = 1.0
_ABSTRACT: Final = sys.platform.startswith("linux")
# Unix sockets as asyncio serves them: not on Windows, where readers fall back to re-reading.
_SUPPORTED: Final = hasattr(socket, "AF_UNIX") and sys.platform != "win32"
log = logging.getLogger("unbroken.proxy")


def address(path: str, pid: int) -> str:
    """The notice socket of the process ``pid`` on the SQLite file ``path``."""
    digest = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:24]
    if _ABSTRACT:
        return f"\0unbroken-journal-{digest}-{pid}"
    return os.path.join(tempfile.gettempdir(), f"unbroken-{os.getuid()}", f"{digest}-{pid}")


class Watched:
    """This process's watch on one stream of a producer elsewhere, shared by its readers."""

    __slots__ = ("changed", "gone", "link", "readers", "version")

    def __init__(self, link: Link) -> None:
        self.link = link
        self.readers = 0
        self.version = 0  # notices received: a reader compares it with the last it saw
        self.gone = False  # the producer said the stream ended or is not live there
        self.changed = asyncio.Event()

    def stopped(self) -> bool:
        """Whether nothing more will come: the stream ended or left, or the link broke."""
        return self.gone or self.link.lost

    def pulse(self) -> None:
        self.version += 1
        self.changed.set()
        self.changed.clear()


class Link:
    """One connection to a producing process, carrying the watches of this process's readers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_lost: Callable[[Link], None]) -> None:
        self._writer = writer
        self._on_lost = on_lost
        self.watched: dict[str, Watched] = {}
        self.lost = False
        self._task = asyncio.get_running_loop().create_task(self._read(reader))

    def send(self, line: str) -> None:
        if self.lost:
            return
        if self._writer.transport.get_write_buffer_size() > MAX_BUFFERED:
            self.close()  # the producer reads no more: its readers look at it, and re-link
            return
        self._writer.write(line.encode() + b"\n")

    def watch(self, stream_id: str) -> Watched:
        watched = self.watched.get(stream_id)
        if watched is None:
            watched = self.watched[stream_id] = Watched(self)
            self.send("+" + stream_id)
        watched.readers += 1
        return watched

    def unwatch(self, watched: Watched, stream_id: str) -> None:
        watched.readers -= 1
        if watched.readers <= 0 and self.watched.get(stream_id) is watched:
            del self.watched[stream_id]
            if not watched.gone:
                self.send("-" + stream_id)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                kind, stream_id = line[:1], line[1:].strip().decode()
                watched = self.watched.get(stream_id)
                if watched is None:
                    continue
                if kind == b"!":
                    watched.gone = True
                watched.pulse()
        except (OSError, ValueError, UnicodeDecodeError):
            pass  # a broken link is a lost one: its readers look at the producer
        finally:
            self.close()

    def close(self) -> None:
        if self.lost:
            return
        self.lost = True
        self._writer.close()
        self._task.cancel()
        for watched in self.watched.values():
            watched.pulse()
        self._on_lost(self)


class NoticeWatch:
    """One reader's watch (``shared_follow.Watch``) on a stream the process ``pid`` produces:
    woken by that process's notices, re-linked if the link was lost and the producer lives."""

    def __init__(self, notices: CommitNotices, stream_id: str, pid: int | None, *,
                 ended: bool) -> None:
        self._notices = notices
        self._stream_id = stream_id
        self._pid = pid
        self._watched: Watched | None = None
        self._seen = 0
        self._told = False  # the reader was told once that the watch is gone or lost
        self.ended = ended

    async def start(self) -> None:
        """Watch before the reader's first read (the producer's answer wakes it again)."""
        if self._pid is None or self.ended:
            return
        link = await self._notices.link(self._pid)
        if link is not None:
            self._watched = link.watch(self._stream_id)
            self._seen = self._watched.version

    async def wait(self, cursor: int, timeout: float) -> list[FrameRecord] | None:
        watched = self._watched
        if watched is not None and watched.stopped():
            if not self._told:  # at once: its producer said the end, or died
                self._told = True
                return None
            if watched.link.lost and not watched.gone:
                self._release()
                await self.start()  # the producer may live: a new link (a lost one failed)
                self._told = False
                watched = self._watched
        if watched is None or watched.stopped():
            # Nothing will say when it changes: the file is read again after ``timeout``.
            await asyncio.sleep(timeout)
            return None
        if watched.version == self._seen:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await watched.changed.wait()
        if watched.version == self._seen:
            return None
        self._seen = watched.version
        if watched.stopped():
            self._told = True  # the reader looks at the stream now (it ended, or its producer)
            return None
        return []

    def _release(self) -> None:
        watched, self._watched = self._watched, None
        if watched is not None:
            watched.link.unwatch(watched, self._stream_id)

    async def aclose(self) -> None:
        self._release()


class _Peer:
    """A process that watches streams produced here: its connection and what it watches."""

    __slots__ = ("watching", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.watching: set[str] = set()

    def send(self, text: str) -> None:
        transport = self.writer.transport
        if transport.is_closing():
            return
        if transport.get_write_buffer_size() > MAX_BUFFERED:
            transport.close()  # it reads no more: it sees the link lost and re-reads the file
            return
        self.writer.write(text.encode())


class CommitNotices:
    """This process's notice socket (producer side) and its links to others (reader side)."""

    def __init__(self, path: str, *, live: Callable[[str], bool],
                 on_cancel: Callable[[str], None]) -> None:
        self._path = path
        self._live = live
        self._on_cancel = on_cancel
        self._server: asyncio.AbstractServer | None = None
        self._address: str | None = None
        self._watchers: dict[str, set[_Peer]] = {}
        self._peers: set[_Peer] = set()
        self._links: dict[int, Link] = {}
        self._connecting: dict[int, asyncio.Future[Link | None]] = {}

    async def serve(self) -> None:
        """Listen for the processes that watch this one's streams."""
        if not _SUPPORTED:
            return
        name = address(self._path, os.getpid())
        if not _ABSTRACT:
            os.makedirs(os.path.dirname(name), mode=0o700, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)  # left by an earlier process with this pid
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=name,
                                                           limit=_MAX_LINE)
        except OSError as error:
            # Another journal of this process on the same file serves it (tests, an app that
            # opens two): readers of this one's streams elsewhere fall back to reading again.
            log.warning("journal notices: cannot listen on %r: %s", name, error)
            return
        self._address = name

    async def close(self) -> None:
        for link in list(self._links.values()):
            link.close()
        for peer in list(self._peers):
            peer.writer.close()
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._address is not None and not _ABSTRACT:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._address)
        self._address = None

    # -- producer side ------------------------------------------------------------------------

    def landed(self, appends: Sequence[tuple[str, Sequence[FrameRecord], StreamState]]) -> None:
        """After a group commit: tell each watcher of a stream in it, one write per peer."""
        if not self._watchers:
            return
        out: dict[_Peer, list[str]] = {}
        for stream_id, _frames, state in appends:
            peers = self._watchers.get(stream_id)
            if not peers:
                continue
            line = ("!" if state.ended else "~") + stream_id + "\n"
            for peer in peers:
                out.setdefault(peer, []).append(line)
            if state.ended:
                self._drop(stream_id)
        for peer, lines in out.items():
            peer.send("".join(lines))

    def gone(self, stream_id: str) -> None:
        """The stream is no longer live here without an end landing (released, discarded)."""
        for peer in self._drop(stream_id):
            peer.send(f"!{stream_id}\n")

    def _drop(self, stream_id: str) -> set[_Peer]:
        peers = self._watchers.pop(stream_id, set())
        for peer in peers:
            peer.watching.discard(stream_id)
        return peers

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(writer)
        if not _same_user(writer):
            writer.close()
            return
        self._peers.add(peer)
        try:
            while line := await reader.readline():
                kind, stream_id = line[:1], line[1:].strip().decode()
                if kind == b"+":
                    if self._live(stream_id):
                        self._watchers.setdefault(stream_id, set()).add(peer)
                        peer.watching.add(stream_id)
                        peer.send(f"={stream_id}\n")
                    else:
                        peer.send(f"!{stream_id}\n")
                elif kind == b"-":
                    self._watchers.get(stream_id, set()).discard(peer)
                    peer.watching.discard(stream_id)
                elif kind == b"x" and self._live(stream_id):
                    self._on_cancel(stream_id)
        except (OSError, ValueError, UnicodeDecodeError):
            pass  # a peer that breaks the protocol or goes away is dropped
        finally:
            self._peers.discard(peer)
            for stream_id in peer.watching:
                peers = self._watchers.get(stream_id)
                if peers is not None:
                    peers.discard(peer)
                    if not peers:
                        del self._watchers[stream_id]
            writer.close()

    # -- reader side --------------------------------------------------------------------------

    async def link(self, pid: int) -> Link | None:
        """The connection to the process ``pid`` on this file (made once and shared), or
        ``None`` if it does not listen (gone, or a proxy without notices)."""
        link = self._links.get(pid)
        if link is not None and not link.lost:
            return link
        if not _SUPPORTED:
            return None
        pending = self._connecting.get(pid)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = self._connecting[pid] = asyncio.get_running_loop().create_future()
        made: Link | None = None
        try:
            reader, writer = await asyncio.open_unix_connection(sock=_connected(
                address(self._path, pid)), limit=_MAX_LINE)
            made = self._links[pid] = Link(reader, writer, self._lost)
        except OSError:
            made = None
        finally:
            del self._connecting[pid]
            pending.set_result(made)
        return made

    def _lost(self, link: Link) -> None:
        for pid, known in list(self._links.items()):
            if known is link:
                del self._links[pid]


def _connected(name: str) -> socket.socket:
    """A socket connected to ``name``. Connected here, not by the event loop: uvloop cannot
    connect to an abstract address (EINVAL), and a local connect answers at once (a full
    backlog waits, ``_CONNECT_S`` at most)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_CONNECT_S)
        sock.connect(name)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _same_user(writer: asyncio.StreamWriter) -> bool:
    """Whether the connecting process runs as this one's user (always true where the socket is
    a file in a directory only this user may enter)."""
    if not _ABSTRACT:
        return True
    sock: socket.socket | None = writer.get_extra_info("socket")
    if sock is None:
        return False
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())
