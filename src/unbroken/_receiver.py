"""``StreamReceiver``: the sans-I/O pipeline bytes -> frames -> events -> ``Message``; and
``parse``, which feeds it a whole body (or a capture's reads) and returns the closed message.

The client, the proxy and ``parse()`` all feed bytes here and act on the ``Frame`` values that come
back: the proxy journals and forwards ``frame.sse`` (its raw bytes), the client yields
``frame.events`` and resets its idle timer on ``frame.is_content``.

Per frame: the dialect parses the payload once, the frame gets its seq (the seq source is fixed by
the first frame: an unbroken proxy's ``<stream_id>:<n>`` id, else the provider's own number, else
a numeric block id, else the frame's position), the dialect turns it into events, and the message
commits them whole or not at all. A decoding error, an oversized event or a malformed payload ends
the message ``failed`` with that error; frames completed before it are committed first. After
that, or after EOF, the receiver takes no more data (``LocalProtocolError``).

A frame an unbroken proxy wrote itself carries its mark (``resumption.py``; where it sits in
the payload is the dialect's ``proxy_mark_fields``) and is read for what the proxy says, never as
the provider's error: a notice that only this response ends early (``resumable``) is not a frame
of the stream and takes no seq, so the message ends ``interrupted`` at the body's end and a
resume reads on; a frame that ends the stream takes its seq and ends the message with the
status the proxy journaled (``ProxyInterrupted``, ``cancelled``, or ``failed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, NamedTuple

from .dialects import (
    DIALECTS,
    Dialect,
    detect_dialect,
    get_dialect,
    sniff_dialect,
    sniff_framing,
)
from .errors import (
    DecodingError,
    EventTooLargeError,
    LocalProtocolError,
    PayloadError,
    StreamError,
)
from .events import (
    ErrorEvent,
    Event,
    Finish,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
)
from .framing import (
    DEFAULT_MAX_EVENT_SIZE,
    SSE,
    Decoder,
    Framing,
    JSONLine,
    SSEDecoder,
    WireFrame,
)
from .message import Message
from .resumption import PROXY_DOMAIN, ProxyMark, parse_event_id, proxy_end_error, valid_seq
from .trace import DEFAULT_RAW_BUDGET, ERROR, IGNORED

__all__ = ["CONTENT_EVENTS", "DEFAULT_STALL_SECONDS", "OUTPUT_EVENTS", "Frame",
           "StreamReceiver", "parse"]

DEFAULT_STALL_SECONDS = 10.0

CONTENT_EVENTS: frozenset[type] = frozenset(
    {TextDelta, ReasoningDelta, ToolCallDelta, Finish, ErrorEvent, StreamEnd}
)
"""Event kinds that move a message forward or end it. ``MessageStart``, ``Usage``, ``Ping`` and
``UnknownEvent`` are not content: they prove the connection lives, not that output flows."""

OUTPUT_EVENTS: frozenset[type] = frozenset({TextDelta, ReasoningDelta, ToolCallDelta})
"""Event kinds that carry output. The rule for time to first chunk: the first chunk is the first
frame with one of these; a lifecycle event (a start, a ping, usage, a finish, the end marker, an
error) never is, so a stream that ended before any output has no first chunk."""


class Frame(NamedTuple):
    """One frame as received: its seq, its events, and whether the message committed them.

    ``sse`` is the decoder's frame (``ServerSentEvent`` or ``JSONLine``; its ``raw`` holds the
    bytes on the wire). ``committed`` is False for a duplicate or a frame the state machine
    rejected.
    """

    seq: int
    block_id: str | None
    nbytes: int
    t: float
    events: list[Event]
    committed: bool
    sse: WireFrame

    @property
    def is_content(self) -> bool:
        """True when the frame carries content or an end (see ``CONTENT_EVENTS``): what resets
        an idle timer. Ping-only and start/usage-only frames are not content."""
        return any(event.__class__ in CONTENT_EVENTS for event in self.events)

    @property
    def has_output(self) -> bool:
        """True when the frame carries output (see ``OUTPUT_EVENTS``): a first chunk."""
        return any(event.__class__ in OUTPUT_EVENTS for event in self.events)


_WHITESPACE = b" \t\r\n"
_new_frame = tuple.__new__  # bypasses NamedTuple's Python-level __new__ on the per-frame path

SeqSourceName = Literal["proxy", "provider", "block_id", "position"]
# What a body that is a JSON array means when the dialect is not known yet.
_ARRAY_BODY: Final = next((cls.json_array_body for cls in DIALECTS if cls.json_array_body), None)


class StreamReceiver:
    """Feed bytes with ``receive_data(data, t)`` and ``receive_eof(t)``; read ``message``.

    ``dialect`` is a dialect name or ``"auto"`` (NDJSON/Ollama when the body starts with ``{``,
    else SSE with the dialect told from the first frame). ``t`` is the receive time in seconds,
    supplied by the caller: the receiver reads no clock. Two frames further apart than
    ``stall_seconds`` leave a ``stall`` warning.
    """

    def __init__(
        self,
        dialect: str = "auto",
        *,
        trace: bool = True,
        max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
        last_event_id: str = "",
        stall_seconds: float = DEFAULT_STALL_SECONDS,
        raw_budget: int = DEFAULT_RAW_BUDGET,
        message: Message | None = None,
        framing: Framing | None = None,
    ) -> None:
        if framing is not None and not isinstance(framing, Framing):
            raise ValueError(f"framing must be a Framing (framing.SSE ...), not {framing!r}")
        self.dialect_name = dialect
        # Overrides the dialect's own framing: an unbroken proxy serves any dialect as SSE on
        # GET /v1/streams/{id}/events, Ollama's JSON lines included.
        self.framing = framing
        self.dialect: Dialect | None = None if dialect == "auto" else get_dialect(dialect)
        self.message = (
            message if message is not None else Message(trace=trace, raw_budget=raw_budget)
        )
        self.stream_id: str | None = None
        # The Unbroken-Stream-Id of the response, when the caller saw one (an unbroken proxy's
        # Gemini and Ollama bodies carry no ids).
        self.proxy_stream: str | None = None
        self.finished = False
        self._max_event_size = max_event_size
        self._last_event_id = last_event_id
        self._stall = stall_seconds
        self._decoder: Decoder | None = None
        self._head = bytearray()  # leading whitespace while the body's shape is unknown
        self._frames_seen = 0
        self._offset = 0  # where the next frame starts in this connection's body
        self._last_seq = -1  # the last seq assigned
        self._position = 0
        self._last_t: float | None = None
        if self.dialect is not None:
            self._configure_message()
            if self.dialect.json_array_body is None:  # else look first: a JSON array, or not
                self._decoder = self._new_decoder(self.dialect.framing)

    @property
    def frames_seen(self) -> int:
        """Frames received on this stream so far, over every connection of it."""
        return self._frames_seen

    @property
    def seq_source(self) -> str | None:
        """How this stream's frames are numbered (fixed by the first frame); held by the
        message, whose gap check needs it too."""
        return self.message.seq_source

    # -- input --------------------------------------------------------------------------------

    def receive_data(self, data: bytes, t: float = 0.0) -> list[Frame]:
        if self.finished:
            raise LocalProtocolError("receive_data() after the receiver finished")
        decoder = self._decoder
        if decoder is None:
            decoder = self._sniff(data)
            if decoder is None:
                return []
            data = bytes(self._head)
            self._head = bytearray()
        # Where this read's first frame starts: event-less blocks (keep-alives) in earlier reads
        # are counted; one before a frame of this same read is not (the decoder drops it).
        self._offset = decoder.bytes_dispatched
        try:
            found: Sequence[Any] = decoder.receive_data(data)
        except (DecodingError, EventTooLargeError, PayloadError) as err:
            frames = self._frames(err.events, t)
            self._fail(err)
            return frames
        return self._frames(found, t) if found else []

    def receive_eof(self, t: float = 0.0) -> list[Frame]:
        """End of body: last frames, evidence about the tail, and the message closed."""
        if self.finished:
            raise LocalProtocolError("receive_eof() after the receiver finished")
        decoder = self._decoder
        if decoder is None:  # nothing but whitespace arrived
            self.finished = True
            self.message.close()
            return []
        self._offset = decoder.bytes_dispatched
        try:
            found: Sequence[Any] = decoder.receive_eof()
        except (DecodingError, EventTooLargeError, PayloadError) as err:
            if not decoder.unterminated:  # a complete frame is bad (an SSE block held at its CR)
                frames = self._frames(err.events, t)
                self._fail(err)
                return frames
            # The bytes cut by EOF do not parse (NDJSON's last line without its LF): a missing
            # end, not a malformed stream.
            found = err.events
        frames = self._frames(found, t)
        if not self.finished:
            _note_unterminated_tail(self.message, decoder.unterminated,
                                    text=self._text_framing())
            self.finished = True
            self.message.close()
        return frames

    def close(self, error: StreamError | None = None, *, cancelled: bool = False) -> None:
        """End early: the transport broke (``error``) or the caller stopped (``cancelled``)."""
        self.finished = True
        self.message.close(error, cancelled=cancelled)

    def reconnect(
        self, last_event_id: str | None = None, *, position_after: int | None = None
    ) -> StreamReceiver:
        """A receiver for the next connection of the same stream: same message (resumed if it
        was interrupted), same dialect state and seq source, a fresh decoder.

        ``position_after``: the server resumes a position-numbered body after that frame (an
        unbroken proxy's Gemini and Ollama bodies carry no ids), so positions continue from it.
        """
        message = self.message
        if message.closed:
            message.resume()  # LocalProtocolError unless interrupted
        other = StreamReceiver(
            self.dialect_name,
            max_event_size=self._max_event_size,
            last_event_id=self._last_event_id if last_event_id is None else last_event_id,
            stall_seconds=self._stall,
            message=message,
            framing=self.framing,
        )
        # What the stream taught the first connection: its dialect (if it was detected), its id
        # and numbering, how many frames came and when the last did (for a stall across the gap).
        if self.dialect is not None:
            detected = other.dialect is None
            # the same object: a call, block or item open at the cut goes on in the next body
            other.dialect = self.dialect
            if detected:
                other._decoder = other._new_decoder(self.dialect.framing)
        other.stream_id = self.stream_id
        other.proxy_stream = self.proxy_stream
        other._frames_seen = self._frames_seen
        other._last_seq = self._last_seq
        other._last_t = self._last_t
        # Positions are only valid for a replay from the start, unless the server says where it
        # resumes.
        other._position = 0 if position_after is None else position_after
        return other

    # -- frames -------------------------------------------------------------------------------

    def _frames(self, found: Sequence[Any], t: float) -> list[Frame]:
        frames: list[Frame] = []
        if not found:
            return frames
        last_t = self._last_t
        if last_t is not None and t - last_t > self._stall:
            self.message.warn("stall", f"no frame for {t - last_t:.1f} s (from t={last_t:.3f})")
        self._last_t = t
        dialect = self.dialect
        commit = self.message.commit
        is_sse = self._decoder.__class__ is SSEDecoder
        source = self.seq_source
        append = frames.append
        # Counters live in locals on the per-frame path and are written back before any call
        # that reads them (detection, failure) and at the end.
        seen, offset, position = self._frames_seen, self._offset, self._position
        for sse in found:
            seen += 1
            if dialect is None:
                self._frames_seen, self._offset = seen, offset
                dialect = self._detect(sse, t)
                if dialect is None:
                    break
            try:
                payload = dialect.load(sse)
            except PayloadError as err:
                self._frames_seen, self._offset = seen, offset
                self._fail_frame(err, sse, t)
                break
            block_id = sse.block_id if is_sse else None
            marked = dialect.proxy_mark_fields(payload, PROXY_DOMAIN)
            mark = None if marked is None else ProxyMark.from_fields(marked)
            if mark is not None and mark.resumable:
                # Only this response ends early: not a frame of the stream, no seq.
                self._note_proxy(mark, sse, t, committed=False)
                append(_new_frame(Frame, (-1, None, sse.nbytes, t, [], False, sse)))
                offset += sse.nbytes
                continue
            if source == "position":
                position += 1
                seq = position
            elif source is None:
                seq = self._first_seq(block_id, payload)
                position = self._position
                source = self.seq_source
            else:
                seq = self._seq(block_id, payload)
            nbytes = sse.nbytes
            if mark is not None:
                # The proxy's last frame of the stream: its seq is committed (a resume reads
                # after it), what it says ends the message.
                committed = commit(seq, [], t, nbytes, block_id, sse.raw)
                append(_new_frame(Frame, (seq, block_id, nbytes, t, [], committed, sse)))
                offset += nbytes
                self._frames_seen, self._offset, self._position = seen, offset, position
                self._note_proxy(mark, sse, t, committed=True)
                return frames
            try:
                events = dialect.events(sse, payload, seq)
            except PayloadError as err:  # valid JSON in a shape the provider does not send
                self._frames_seen, self._offset, self._position = seen, offset, position
                self._fail_frame(err, sse, t)
                break
            committed = commit(seq, events, t, nbytes, block_id, sse.raw)
            append(_new_frame(Frame, (seq, block_id, nbytes, t, events, committed, sse)))
            offset += nbytes
        self._frames_seen, self._offset, self._position = seen, offset, position
        return frames

    def _first_seq(self, block_id: str | None, payload: Any) -> int:
        """Fix the stream's seq source from its first frame, then number that frame."""
        source: SeqSourceName
        if block_id is not None and (named := parse_event_id(block_id)):
            source = "proxy"
            self.stream_id = named[0]
        elif self._provider_seq(payload) is not None:
            source = "provider"
        elif block_id is not None and valid_seq(block_id):
            source = "block_id"
        else:
            source = "position"
        self.message.seq_source = source
        if source == "position":
            self._position += 1
            return self._position
        return self._seq(block_id, payload)

    def _provider_seq(self, payload: Any) -> int | None:
        assert self.dialect is not None  # a frame is numbered after its dialect is known
        return self.dialect.provider_seq(payload)

    def _seq(self, block_id: str | None, payload: Any) -> int:
        source = self.seq_source
        seq: int | None = None
        if source == "provider":
            seq = self._provider_seq(payload)
        elif block_id is not None:
            if source == "proxy":
                named = parse_event_id(block_id)
                seq = named[1] if named else None
            elif valid_seq(block_id):
                seq = int(block_id)
        if seq is None:
            # A frame without its number in a numbered stream: it follows the one before.
            seq = self._last_seq + 1
        self._last_seq = seq
        return seq

    # -- the body's shape ---------------------------------------------------------------------

    def _sniff(self, data: bytes) -> Decoder | None:
        """Look at the first non-whitespace byte: a framing's own first byte names the dialect
        (``{``: Ollama's NDJSON), ``[`` is a JSON array (Gemini without ``alt=sse``)."""
        head = self._head
        head += data
        first = next((b for b in head if b not in _WHITESPACE), None)
        if first is None:
            return None
        dialect = self.dialect
        array_body = _ARRAY_BODY if dialect is None else dialect.json_array_body
        if first == 0x5B and array_body is not None:  # "["
            self._fail(
                PayloadError(
                    array_body, line=1, offset=len(head) - len(head.lstrip(_WHITESPACE))
                )
            )
            return None
        if dialect is None:
            dialect = self.dialect = sniff_dialect(first)
            if dialect is not None:
                self._configure_message()
        # a framing several dialects share (Bedrock's): its first frame tells the dialect
        decoder = self._decoder = self._new_decoder(
            dialect.framing if dialect is not None else sniff_framing(first)
        )
        return decoder

    def _detect(self, frame: Any, t: float) -> Any:
        name = detect_dialect(frame)
        if name is None:
            self._fail_frame(
                PayloadError("dialect 'auto': the first frame matches no known dialect"), frame, t
            )
            return None
        self.dialect = get_dialect(name)
        self._configure_message()
        return self.dialect

    def _new_decoder(self, framing: Framing | None) -> Decoder:
        """A decoder for the dialect's framing (``None``: not known yet, SSE), unless the
        receiver was told another framing."""
        chosen = self.framing or framing or SSE
        return chosen.new_decoder(self._max_event_size, self._last_event_id)

    def _text_framing(self) -> bool:
        framing = self.framing or (self.dialect.framing if self.dialect is not None else SSE)
        return framing.text

    def _configure_message(self) -> None:
        assert self.dialect is not None
        self.message.expect_end_marker = self.dialect.end_marker

    # -- endings ------------------------------------------------------------------------------

    def _note_proxy(self, mark: ProxyMark, sse: Any, t: float, *, committed: bool) -> None:
        """Record what the proxy said; a frame that ends the stream (``committed``) ends the
        message with the status the proxy journaled."""
        message = self.message
        if not committed:
            message.warn("proxy_notice", f"the proxy ended this response early: {mark.code}: "
                                         f"{mark.message}")
            if message.trace.enabled:
                message.trace.record(-1, None, sse.nbytes, t, [], IGNORED, sse.raw)
            return
        message.warn("proxy_end", f"the proxy ended the stream {mark.status}: {mark.code}: "
                                  f"{mark.message}")
        self.finished = True
        error = proxy_end_error(mark)
        message.close(error, cancelled=error is None)

    def _fail_frame(self, err: PayloadError, frame: Any, t: float) -> None:
        err.line = frame.line if isinstance(frame, JSONLine) else self._frames_seen
        err.offset = self._offset
        message = self.message
        if message.trace.enabled:
            message.trace.record(
                -1, getattr(frame, "block_id", None), frame.nbytes, t, [], ERROR, frame.raw
            )
        self._fail(err)

    def _fail(self, err: StreamError) -> None:
        self.finished = True
        self.message.close(err)


def _note_unterminated_tail(message: Message, tail: bytes, *, text: bool = True) -> None:
    """Evidence about a body that ended inside a frame (the decoder's ``unterminated``): warn
    about a non-empty tail, and (for a text framing) about half a UTF-8 character at its end."""
    if not tail:
        return
    message.warn(
        "unterminated_tail", f"{len(tail)} bytes after the last complete frame: {tail[:80]!r}"
    )
    if not text:
        return
    try:
        tail.decode("utf-8")
    except UnicodeDecodeError as bad:
        if bad.end == len(tail) and bad.reason == "unexpected end of data":
            message.warn(
                "truncated_utf8",
                f"the body ended inside a UTF-8 character ({len(tail) - bad.start} of its "
                "bytes arrived)",
            )


def parse(
    chunks: Iterable[bytes | tuple[float, bytes]] | bytes,
    dialect: str = "auto",
    trace: bool = True,
    *,
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
    raw_budget: int = DEFAULT_RAW_BUDGET,
) -> Message:
    """Feed ``chunks`` (bytes, or ``(seconds, bytes)`` pairs from a capture) and EOF.

    Never raises for bad input: a decoding error, an oversized event or a malformed payload ends
    the message ``failed`` with the error in ``message.error``; what was committed before it is
    kept. Bytes after such an error are not read. (An unknown dialect name is a ``ValueError``:
    that is a mistake in the call, not in the input.)
    """
    if isinstance(chunks, bytes | bytearray | memoryview):
        chunks = [bytes(chunks)]  # one body, not an iterable of ints
    receiver = StreamReceiver(
        dialect,
        trace=trace,
        max_event_size=max_event_size,
        stall_seconds=stall_seconds,
        raw_budget=raw_budget,
    )
    t = 0.0
    for chunk in chunks:
        if isinstance(chunk, tuple):
            t, data = chunk
        else:
            data = chunk
        receiver.receive_data(data, t)
        if receiver.finished:
            return receiver.message
    receiver.receive_eof(t)
    return receiver.message

