"""One proxied stream's response body as ``ResumingTransport`` hands it on: whole frames only,
the seq of the last one passed on, and the proxy's notice held back.

No I/O here: the transport feeds each connection's bytes in (the POST's, then each resume's) and
passes on what comes back: per read, one piece holding every frame it completes, so the bytes
handed on are the proxy's own, never half a frame or half a character. Numbered SSE frames in
the proxy's form are cut by byte searches over the whole read (``numbered_blocks``), with no
object per frame; anything else (the first read that is not that form, NDJSON, a body without
ids, a resume rewritten to the POST's form) by the project's decoders (``SSEDecoder``,
``NDJSONDecoder``) at the byte offset they have dispatched up to, for the rest of that
connection. The seq of a frame is its id (``<stream_id>:<n>``) or, in a body without ids
(Ollama's NDJSON, a Gemini POST), its position.

A resume (``GET /v1/streams/{id}/events``) always answers SSE with ids. Its frames are handed on
in the POST's own form: verbatim if the POST carried ids, else without ``id:``/``retry:`` lines
(google-genai reads any line but ``data:`` as JSON) or as NDJSON lines.
"""

from __future__ import annotations

from typing import Any

import httpx2

from .._jsonparse import loads
from ..dialects.gemini import GeminiDialect
from ..dialects.ollama import OllamaDialect
from ..errors import StreamError
from ..framing import DEFAULT_MAX_EVENT_SIZE, JSONLine, NDJSONDecoder, ServerSentEvent, SSEDecoder
from ..resumption import PROXY_DOMAIN, event_id, event_id_prefix, parse_event_id, proxy_mark
from .numbered_blocks import BLOCK_END, NumberedBlocks

__all__ = ["ProxiedBody", "ResumeMismatch"]

# The proxy's mark in a body without ids is read by its dialect (resumption.proxy_mark).
_GEMINI = GeminiDialect()
_OLLAMA = OllamaDialect()
_BOM = b"\xef\xbb\xbf"


class ResumeMismatch(httpx2.RemoteProtocolError):
    """A resumed body did not continue the stream: its first frame is not the next seq of the
    same stream. Nothing of it was handed on."""

    def __init__(self, expected: str, got: str) -> None:
        super().__init__(f"unbroken: the resumed stream does not continue this body: expected "
                         f"frame {expected}, got {got or 'a frame without an id'}; nothing of "
                         f"it was passed on")
        self.expected = expected
        self.got = got


class ProxiedBody:
    """State of one proxied body across its connections."""

    __slots__ = ("_blocks", "_buf", "_decoder", "_frames", "_held", "_ids", "_midway",
                 "_ndjson", "_notice", "_opaque", "_prefix", "_resumed", "_searching", "seq",
                 "stream_id")

    def __init__(self, stream_id: str, *, ndjson: bool, after: int = 0) -> None:
        self.stream_id = stream_id
        # The last frame handed on (the proxy numbers frames 1, 2, 3 ...): ``after`` when the
        # POST itself asked to continue with ``Last-Event-ID``.
        self.seq = after
        self._prefix = event_id_prefix(stream_id)
        self._blocks = NumberedBlocks(stream_id)
        self._ndjson = ndjson
        self._ids: bool | None = None  # whether the POST's frames carry ids; fixed by its first
        self._held = b""  # an unnumbered error frame: the proxy's notice if the body ends here
        self._notice = b""  # the last connection's notice, until a resume brings a frame
        self._frames = 0  # frames handed on by the current connection
        self._resumed = False
        self._opaque = False  # the decoder refused the bytes: hand them on as they come
        self._buf = bytearray()  # bytes of the current connection not yet handed on
        # The decoder that has read self._buf, until the connection ends; None while the
        # reads are cut by byte searches (self._buf is then the frame in progress).
        self._decoder: SSEDecoder | NDJSONDecoder | None = NDJSONDecoder() if ndjson else None
        # Whether the connection's reads are cut by byte searches: numbered SSE frames (or a
        # POST's first, which may be), no decoder yet, nothing held (only a decoder holds).
        self._searching = not ndjson
        self._midway = False  # the byte searches have handed on bytes of this connection

    @property
    def progressed(self) -> bool:
        """Whether the current connection handed on at least one frame."""
        return self._frames > 0

    @property
    def last_event_id(self) -> str:
        return event_id(self.stream_id, self.seq)

    def resumed(self) -> None:
        """A resume's body follows: SSE with ids, whatever the POST's form."""
        if self._ids is None:
            self._ids = False  # no frame of the POST came: hand on the form without ids
        if self._held:
            # Never handed on now: a journaled frame comes again, numbered, from the resume.
            self._notice, self._held = self._held, b""
        self._decoder = None
        self._searching = self._ids  # else the decoder rewrites its frames to the POST's form
        self._midway = False
        self._buf.clear()
        self._frames = 0
        self._resumed = True

    def receive(self, chunk: bytes) -> bytes:
        """The whole frames that ``chunk`` completes, in the POST's form (maybe ``b""``)."""
        if self._searching:
            out = self._cut(chunk)
            if out is not None:
                return out
            # The decoder takes the connection from here, at the start of the frame in progress.
            self._searching = False
            self._decoder = self._new_decoder()
            if self._buf:
                chunk = bytes(self._buf) + chunk
                self._buf.clear()
        elif self._opaque:
            return chunk
        decoder = self._decoder
        if decoder is None:  # a resume of a POST without ids: rewritten to the POST's form
            decoder = self._decoder = self._new_decoder()
        return self._decoded(decoder, chunk)

    def _decoded(self, decoder: SSEDecoder | NDJSONDecoder, chunk: bytes) -> bytes:
        base = decoder.bytes_dispatched
        try:
            frames: list[Any] = decoder.receive_data(chunk)
        except StreamError:
            return self._refused(chunk)
        cut = decoder.bytes_dispatched - base
        if not self._buf and cut == len(chunk):
            region = chunk  # the common case: the read ends at a frame's end, nothing copied
        else:
            self._buf += chunk
            region = bytes(self._buf[:cut])
            del self._buf[:cut]
        if not frames and not self._resumed:
            return region  # blank lines, keep-alive comments: as they came
        if self._ndjson and not self._resumed:
            return self._lines(frames, region)
        if self._ids and not self._held:
            # The hot path: numbered frames in order, handed on as they came.
            prefix, seq = self._prefix, self.seq
            for index, event in enumerate(frames):
                if event.block_id != prefix + str(seq + 1):
                    self._advance(seq)
                    return self._events(frames[index:], region)
                seq += 1
            self._advance(seq)
            return region
        return self._events(frames, region)

    def receive_eof(self) -> bool:
        """The current connection ended cleanly: True if the stream ended with it. False if it
        stopped inside a frame or on the proxy's notice: the body is to be resumed."""
        if self._opaque:
            return True
        if self._buf:  # inside a frame (or a BOM)
            return False
        return not self._held

    def give_up(self) -> bytes:
        """The last bytes of a body that will not be resumed: the proxy's notice, if it sent
        one, so that the SDK raises on it as it does without this transport."""
        held = self._held or self._notice
        self._held = self._notice = b""
        return held

    # -- frames ---------------------------------------------------------------------------------

    def _cut(self, chunk: bytes) -> bytes | None:
        """The whole numbered frames that ``chunk`` completes, found by byte searches; ``None``
        (nothing changed) if the read is not in the proxy's form or is near the size limit:
        the decoder reads it."""
        buf = self._buf
        at = chunk.rfind(BLOCK_END)
        if at >= 0:
            end = at + len(BLOCK_END)
        elif buf and buf[-1] == 0x0A and chunk[:1] == b"\n":
            end = 1  # the blank line's LF begins this read
        elif not buf and chunk[:1] == b"\n":
            return None  # a blank line at a block start: a block of its own
        else:  # no block ends in this read
            if len(buf) + len(chunk) > DEFAULT_MAX_EVENT_SIZE:
                return None  # the decoder refuses it
            buf += chunk
            return b""
        rest = len(chunk) - end
        if buf:
            run = b"".join((buf, memoryview(chunk)[:end]))
        else:
            run = chunk[:end] if rest else chunk
        if len(run) > DEFAULT_MAX_EVENT_SIZE or rest > DEFAULT_MAX_EVENT_SIZE:
            return None
        seq = self._blocks.last_seq(run, self.seq)
        if seq is None:
            return None
        if rest:
            buf[:] = memoryview(chunk)[end:]
        elif buf:
            buf.clear()
        self._ids = self._midway = True
        self._advance(seq)
        return run

    def _new_decoder(self) -> SSEDecoder:
        # Frames are handed on as raw bytes, so invalid UTF-8 is the SDK's to judge.
        decoder = SSEDecoder(errors="replace")
        if self._midway:
            decoder.receive_data(_BOM)  # a body's leading BOM is stripped; this is not its start
        return decoder

    def _refused(self, chunk: bytes) -> bytes:
        """Bytes the decoder cannot frame (a malformed NDJSON line, an event over its size
        limit): not a body to resume. Everything not yet handed on goes now, as it came, and
        the rest of the body after it; the SDK judges those bytes as it would without this."""
        self._opaque = True
        pending = self._held + bytes(self._buf) + chunk
        self._held = self._notice = b""
        self._buf.clear()
        return pending

    def _advance(self, seq: int) -> None:
        if seq != self.seq:
            self._frames += seq - self.seq
            self.seq = seq
            self._notice = b""

    def _release(self, *, numbered: bool) -> bytes:
        """A frame followed the held one: it was not the proxy's last word but the stream's."""
        held, self._held = self._held, b""
        if not numbered:
            self.seq += 1
            self._frames += 1
        return held

    def _lines(self, lines: list[JSONLine], region: bytes) -> bytes:
        """NDJSON lines of the POST: seq by position; an error line of the proxy's is held."""
        before = b""
        held_here = False
        for line in lines:
            if self._held:
                released = self._release(numbered=False)
                before, held_here = (before if held_here else released), False
            if self._is_ollama_notice(line.value):
                self._held, held_here = line.raw, True
                continue
            self.seq += 1
            self._frames += 1
        return self._without_held(before + region if before else region, held_here)

    def _events(self, events: list[ServerSentEvent], region: bytes) -> bytes:
        """SSE frames: seq from their ids (each checked) or by position; an unnumbered error
        frame is held. A resume's frames are rewritten to the POST's form when it had no ids."""
        rewrite = self._resumed and not self._ids
        out: list[bytes] = []
        before = b""
        held_here = False
        for event in events:
            block_id = event.block_id
            if self._held:
                released = self._release(numbered=block_id is not None or bool(self._ids))
                if rewrite:
                    out.append(released)
                elif not held_here:
                    before = released  # held from the read before: it precedes this region
                held_here = False
            if self._ids is None:
                self._ids = block_id is not None
            if block_id is not None:
                self._numbered(block_id)
            elif self._ids or self._resumed or self._is_position_notice(event):
                # Every frame the proxy journals is numbered, so an unnumbered one is its own.
                self._held = self._as_posted(event) if rewrite else event.raw
                held_here = True
                continue
            else:
                self.seq += 1
                self._frames += 1
            if rewrite:
                out.append(self._as_posted(event))
        if rewrite:
            return b"".join(out)
        return self._without_held(before + region if before else region, held_here)

    def _without_held(self, region: bytes, held_here: bool) -> bytes:
        """The region less the frame held at its end (blank lines and comments stay)."""
        if not held_here:
            return region
        at = region.rfind(self._held)
        return region[:at] + region[at + len(self._held):]

    def _numbered(self, block_id: str) -> None:
        """Check a frame's id continues this body: the same stream, the next seq."""
        expected = self.seq + 1
        if parse_event_id(block_id) != (self.stream_id, expected):
            raise ResumeMismatch(event_id(self.stream_id, expected), block_id)
        self.seq = expected
        self._frames += 1
        self._notice = b""

    def _as_posted(self, event: ServerSentEvent) -> bytes:
        """A resumed frame in the POST's form: verbatim with ids, else its ``event:`` and
        ``data:`` lines only, or its data as an NDJSON line."""
        lines = event.raw.splitlines()
        if self._ndjson:
            data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
            return b"\n".join(data) + b"\n"
        kept = [line for line in lines if line.startswith((b"data:", b"event:"))]
        return b"\n".join(kept) + b"\n\n"

    @staticmethod
    def _is_position_notice(event: ServerSentEvent) -> bool:
        """In a body without ids (a Gemini POST) the proxy marks its notice."""
        if PROXY_DOMAIN not in event.data:  # cheap: most frames are not the proxy's
            return False
        try:
            mark = proxy_mark(_GEMINI, loads(event.data))
        except ValueError:
            return False
        return mark is not None and mark.resumable

    @staticmethod
    def _is_ollama_notice(value: Any) -> bool:
        """An Ollama error line the proxy wrote: it may be its notice (a journaled one comes
        back from the resume, numbered)."""
        return proxy_mark(_OLLAMA, value) is not None
