"""What every dialect shares: the ``Dialect`` protocol, the ``[DONE]`` sentinel and a base class.

A dialect object serves one stream. It may keep a little state (has the message started, which
content blocks are tool calls, how many function calls came so far). Frames the ``Message`` will
drop as duplicates (``seq`` not above the highest seq seen) are still parsed, for the trace, but
without moving that state: a replayed frame must not shift tool-call indexes.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final, Protocol, TypeVar

from .._jsonparse import dumps_compact, loads
from ..errors import PayloadError
from ..events import (
    ErrorEvent,
    Event,
    Finish,
    MessageStart,
    UnknownEvent,
)
from ..finish import UNMAPPED, FinishReason, Status
from ..framing import SSE, Framing
from .genai_messages import GenAIInput
from .routes import Route

__all__ = [
    "DONE",
    "NOTHING",
    "PASS",
    "Dialect",
    "DialectBase",
    "Handler",
    "PartHandler",
    "SSEDialect",
    "count",
    "finish",
    "marked_error",
]

Handler = Callable[[Any, Any, int], list[Event]]
"""A dialect's handler of one kind of payload, as a function of the class: ``(dialect,
payload, seq)``."""
PartHandler = Callable[[Any, Any, Any, int], list[Event]]
"""A handler of one kind of part of a payload: ``(dialect, payload, part, seq)``."""
FinishTable = Mapping[str, tuple[Status, FinishReason]]
_T = TypeVar("_T")

PASS: Final = "pass"
"""Table value for an event type that is passed through as ``UnknownEvent``."""

NOTHING: Final = "nothing"
"""Table value for a field that says nothing worth an event (``role``: always "assistant")."""


class _Done:
    """The type of ``DONE``; one instance only."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DONE"


DONE: Final = _Done()
"""What ``load`` returns for the ``[DONE]`` sentinel (it is not JSON)."""


class Dialect(Protocol):
    """One provider's wire format, for one stream, and everything else about that provider.

    The receiver, the proxy, the client and the mock read the provider's attributes below; none
    of them asks for a dialect by name.
    """

    # -- the provider as data ----------------------------------------------------------------
    name: ClassVar[str]
    framing: ClassVar[Framing]
    media_type: ClassVar[str]  # what the provider's streaming response says it is
    end_marker: ClassVar[bool]  # a marker ([DONE], message_stop) follows the finish reason
    route: ClassVar[Route]  # the proxy's routes and the provider's default origin
    # Why a body that is a JSON array is not this stream (Gemini without ?alt=sse), or None.
    json_array_body: ClassVar[str | None]
    numbered: ClassVar[bool]  # the provider numbers its frames (``provider_seq``)
    resumes_upstream: ClassVar[bool]  # a cut stream continues upstream by its response id
    # The POST body carries ids only when the request accepts text/event-stream (google-genai
    # reads every other line as JSON).
    ids_when_accepted: ClassVar[bool]
    # The OpenTelemetry GenAI conventions' names: ``gen_ai.provider.name`` and
    # ``gen_ai.operation.name`` (a path with another operation is in ``genai_path_operations``).
    genai_provider: ClassVar[str]
    genai_operation: ClassVar[str]
    genai_path_operations: ClassVar[Mapping[str, str]]

    def load(self, frame: Any) -> Any:
        """Parse the payload once: ``DONE`` for ``[DONE]``; ``PayloadError`` if malformed."""
        ...

    def provider_seq(self, payload: Any) -> int | None:
        """The provider's own sequence number for this payload, if it has one."""
        ...

    def events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        """The normalized events of one frame, all carrying ``seq``."""
        ...

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """An unbroken proxy's own frame in this provider's error shape (so its SDK raises):
        the SSE event name or ``None``, and the payload, with ``mark`` under ``domain`` the
        way this provider's errors can carry it (``resumption.proxy_error``)."""
        ...

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        """The mark ``proxy_error`` wrote, plus the error's ``message``; ``None`` for any other
        payload. Cheap: the receiver asks it of every frame."""
        ...

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """A whole (not streamed) error body in this provider's shape, for an HTTP ``status``
        the proxy answers itself."""
        ...

    def wrap_error(self, error: dict[str, Any]) -> dict[str, Any]:
        """The payload of a stream frame that carries ``error``, an error object as the
        provider's SDK reports it (the SDK wrappers read an SDK's exception back as a frame)."""
        ...

    @staticmethod
    def usage_request(body: bytes) -> bytes | None:
        """The streaming request ``body`` rewritten to ask for usage in the stream, or ``None``:
        the provider reports usage unasked, or this body needs no change."""
        ...

    @staticmethod
    def genai_input(body: dict[str, Any]) -> GenAIInput:
        """The request's messages and system instructions in the GenAI conventions' shape
        (``genai_messages.py``), for a span that captures content."""
        ...

    def frame_bytes(self, payload: dict[str, Any]) -> bytes:
        """The bytes of a frame the proxy writes itself (``proxy_error``'s payload) in this
        provider's framing, as ``load`` reads them back: the JSON text for a text framing."""
        ...


def count(value: Any) -> int | None:
    """A token count as reported, or ``None`` when absent or not an integer."""
    return value if type(value) is int else None


def finish(table: FinishTable, raw: str, seq: int, *, final: bool = True) -> Finish:
    """A ``Finish`` from a dialect's table; an unknown raw reason is kept and maps to UNMAPPED."""
    status, reason = table.get(raw, UNMAPPED)
    return Finish(seq=seq, status=status, reason=reason, raw=raw, final=final)


def marked_error(error: Any, domain: str) -> dict[str, str] | None:
    """The proxy's mark in a provider's error object (under ``domain``), with the object's
    ``message``; ``None`` if the object carries no mark. For dialects whose error frames are a
    JSON object with a ``message`` (``Dialect.proxy_mark_fields``)."""
    mark = error.get(domain) if isinstance(error, dict) else None
    if not isinstance(mark, dict):
        return None
    message = error.get("message")
    return {**mark, "message": message if isinstance(message, str) else ""}


def error_event(seq: int, type_: str, message: Any, retryable: bool, raw: Any) -> ErrorEvent:
    return ErrorEvent(
        seq=seq,
        type=type_,
        message=message if isinstance(message, str) else "",
        retryable=retryable,
        raw=raw,
    )


class DialectBase(ABC):
    """Duplicate-safe dispatch and ``MessageStart`` bookkeeping shared by all dialects.

    Subclasses set ``name``, ``route``, the provider attributes that differ from these
    defaults, ``_state`` (the attribute names that hold per-stream state) and implement
    ``_events``.
    """

    # -- the provider as data (see ``Dialect``) ------------------------------------------------
    name: ClassVar[str] = ""
    framing: ClassVar[Framing] = SSE
    media_type: ClassVar[str] = "text/event-stream"
    end_marker: ClassVar[bool] = True
    route: ClassVar[Route]
    json_array_body: ClassVar[str | None] = None
    numbered: ClassVar[bool] = False
    resumes_upstream: ClassVar[bool] = False
    ids_when_accepted: ClassVar[bool] = False
    genai_provider: ClassVar[str] = ""
    genai_operation: ClassVar[str] = "chat"
    genai_path_operations: ClassVar[Mapping[str, str]] = MappingProxyType({})

    _state: tuple[str, ...] = ("_started",)
    _tables: ClassVar[dict[str, Any]]  # see _shared

    def __init__(self) -> None:
        self._high_seq = -(2**63)
        self._started = False

    def provider_seq(self, payload: Any) -> int | None:
        return None

    def frame_bytes(self, payload: dict[str, Any]) -> bytes:
        return dumps_compact(payload).encode()

    def wrap_error(self, error: dict[str, Any]) -> dict[str, Any]:
        return {"error": error}

    @staticmethod
    def usage_request(body: bytes) -> bytes | None:
        return None  # most providers report usage in every stream

    @staticmethod
    def genai_input(body: dict[str, Any]) -> GenAIInput:
        return [], []  # a dialect that knows its request's shape says more

    def events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        try:
            if seq > self._high_seq:
                self._high_seq = seq
                return self._events(frame, payload, seq)
            return self._replayed(frame, payload, seq)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            # Valid JSON in a shape the provider does not document (a string where an object
            # belongs, ...): the frame is unusable, and saying so beats guessing at its text.
            raise PayloadError(f"{self.name}: unexpected payload shape: {exc!r}") from exc

    def _replayed(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        """A frame the Message will drop: parse it for the trace, then put the state back."""
        saved = [copy.copy(getattr(self, attr)) for attr in self._state]
        try:
            self._rewind(seq)
            return self._events(frame, payload, seq)
        finally:
            for attr, value in zip(self._state, saved, strict=True):
                setattr(self, attr, value)

    def _rewind(self, seq: int) -> None:
        """Before a replayed frame: put back what the state was when ``seq`` first came."""
        return None  # most dialects number nothing by arrival: nothing to put back

    @abstractmethod
    def load(self, frame: Any) -> Any:
        """Parse the payload once (see ``Dialect.load``)."""

    @abstractmethod
    def _events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        """The events of one frame; may advance the per-stream state."""

    @abstractmethod
    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """See ``Dialect.proxy_error``."""

    @abstractmethod
    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        """See ``Dialect.proxy_mark_fields``."""

    @abstractmethod
    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """See ``Dialect.error_body``."""

    def _start(self, seq: int, id_: Any, model: Any) -> list[Event]:
        """One ``MessageStart`` per stream, at the first frame that names an id or a model."""
        if self._started or not (id_ or model):
            return []
        self._started = True
        return [
            MessageStart(
                seq=seq,
                id=id_ if isinstance(id_, str) and id_ else None,
                model=model if isinstance(model, str) and model else None,
            )
        ]

    @classmethod
    def _shared(cls, name: str, build: Callable[[], _T]) -> _T:
        """A table of this class's handlers, built once per class, not once per stream: every
        stream has its own dialect object (its state), and a dict of bound methods per table
        was ~1.5 KiB of every live stream the proxy holds. Callers pass the dialect itself:
        ``handler(self, payload, seq)``."""
        tables: dict[str, Any] | None = cls.__dict__.get("_tables")
        if tables is None:
            tables = {}
            cls._tables = tables  # on this class: a subclass's handlers are its own
        if name not in tables:
            tables[name] = build()
        table: _T = tables[name]
        return table

    @classmethod
    def _bind(cls, table: Mapping[str, str]) -> dict[str, Handler]:
        """Handlers for the table's top-level kinds (``PASS`` -> ``_pass``), per class.

        Keys with a ``/`` name sub-kinds (``content_block_delta/text_delta``); a dialect binds
        those itself with ``_bind_parts``.
        """
        return cls._shared(f"{id(table)}", lambda: {
            key: getattr(cls, "_" + value) for key, value in table.items() if "/" not in key})

    @classmethod
    def _bind_parts(cls, top: str,
                    table: Mapping[str, str]) -> dict[str, PartHandler | None]:
        """Handlers for the sub-kinds of ``top`` (``PASS`` -> ``_part_pass``), per class.

        ``NOTHING`` binds to ``None``: the caller skips the field without a call.
        """
        prefix = top + "/"
        return cls._shared(f"{id(table)}:{prefix}", lambda: {
            key[len(prefix) :]: None if value == NOTHING else getattr(cls, "_part_" + value)
            for key, value in table.items()
            if key.startswith(prefix)
        })

    def _part_pass(self, payload: Any, part: Any, seq: int) -> list[Event]:
        kind = part.get("type") if isinstance(part, dict) else None
        return [UnknownEvent(seq=seq, type=f"{self._kind(payload)}/{kind}", raw=payload)]

    def _pass(self, payload: Any, seq: int) -> list[Event]:
        return [UnknownEvent(seq=seq, type=self._kind(payload), raw=payload)]

    def _kind(self, payload: Any) -> str:
        kind = payload.get("type") if isinstance(payload, dict) else None
        return kind if isinstance(kind, str) else "unknown"


class SSEDialect(DialectBase):
    """A dialect carried by Server-Sent Events whose data is one JSON object per event."""

    def load(self, frame: Any) -> Any:
        data: str = frame.data
        if data.startswith("[DONE]"):
            return DONE
        try:
            payload = loads(data)
        except ValueError as exc:
            raise PayloadError(f"{self.name}: malformed JSON in event data: {exc}") from exc
        if type(payload) is not dict:
            raise PayloadError(self._not_an_object(payload))
        return payload

    def _not_an_object(self, payload: Any) -> str:
        return f"{self.name}: event data is JSON {type(payload).__name__}, expected an object"
