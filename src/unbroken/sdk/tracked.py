"""The iteration shell shared by the SDK adapters: yield the SDK's objects, commit their events.

An adapter (``SDKAdapter``) knows one SDK: how to turn one of its stream objects back into the
wire payload the dialect maps (``payload``), which dialect that is, and what an exception means
(``error_payload``: the provider's error body, or ``None`` for a transport failure). The events
come from the dialect's own tables: nothing here maps a provider field.

Ending: the SDK's iterator running out closes the message (its status then says whether a
finish reason came). An exception propagates unchanged and ends the message as
``unbroken.stream`` would: a final HTTP status interrupts it (``UpstreamStatusError``), a
provider error or bytes the SDK could not read fail it (``ProviderError``, ``PayloadError``),
anything else interrupts it (``TransportError``). Leaving the loop early, ``close()`` or the
``with`` block ending first cancels it (a finish reason already received still decides). An
error an unbroken proxy wrote itself (``resumption.py``) ends the message with the status the
proxy journaled (``interrupted`` with ``ProxyInterrupted``), never as the provider's error.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from .. import telemetry
from .._jsonparse import dumps_compact
from .._receiver import DEFAULT_STALL_SECONDS, OUTPUT_EVENTS
from ..dialects import find_dialect
from ..errors import PayloadError, StreamError, TransportError, UpstreamStatusError
from ..events import TextDelta
from ..framing import ServerSentEvent
from ..message import Message
from ..resumption import proxy_end_error, proxy_mark
from ..telemetry import Observation

__all__ = [
    "AsyncTrackedStream",
    "SDKAdapter",
    "TrackedStream",
    "is_sdk_error",
    "refuse_unawaited",
    "status_error",
]

T = TypeVar("T")


class SDKAdapter(Protocol):
    expect_end_marker: bool

    def dialect_for(self, payload: dict[str, Any]) -> Any:
        """The dialect object of this stream (fixed by the first payload)."""
        ...

    def payload(self, obj: Any) -> dict[str, Any] | None:
        """The wire payload of one SDK object; ``None`` for an object the SDK made up itself."""
        ...

    def error_payload(self, exc: BaseException) -> dict[str, Any] | None:
        """The provider's error as the wire carries it, or ``None`` if ``exc`` is no such error."""
        ...


def is_sdk_error(exc: BaseException, module: str, name: str) -> bool:
    """Whether ``exc`` is (a subclass of) the SDK's error class, without importing the SDK."""
    return any(cls.__module__ == module and cls.__name__ == name for cls in type(exc).__mro__)


def status_error(exc: BaseException) -> UpstreamStatusError | None:
    """The final non-2xx HTTP status an SDK's exception reports, as ``UpstreamStatusError``.

    The SDKs keep the status as ``status_code`` (openai, anthropic, ollama; ollama's ``-1`` is
    an error line inside a 200 stream) or on the ``response`` (google-genai). An error event
    inside a 200 stream is the provider's, not a status: ``None``.
    """
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if status is None:
        status = getattr(response, "status_code", None)
    if status.__class__ is not int or not 300 <= status <= 599:
        return None
    body: Any = next((value for name in ("error", "details", "body")
                      if (value := getattr(exc, name, None))), str(exc))
    headers = getattr(response, "headers", None)
    delay = None
    if headers is not None:
        from ..client.policy import server_retry_delay  # only on this rare path: it loads httpx2

        delay = server_retry_delay(headers)
    refused = UpstreamStatusError(
        status, body if isinstance(body, str) else dumps_compact(body), retry_after=delay)
    refused.__cause__ = exc
    return refused


def refuse_unawaited(stream: Any, function: str, call: str) -> NoReturn:
    """A coroutine passed where its stream was meant (``from_gemini(client.aio...)``)."""
    close = getattr(stream, "close", None)
    if callable(close):  # a coroutine never awaited warns when it is collected
        close()
    raise TypeError(f"{function}() takes the stream: pass `await {call}`")


class _Tracker:
    """Commits one SDK stream's payloads to a ``Message`` through the dialect."""

    def __init__(self, adapter: SDKAdapter, *, trace: bool) -> None:
        self.adapter = adapter
        self.message = Message(trace=trace, expect_end_marker=adapter.expect_end_marker)
        self._last_seq = 0
        self._by_provider: bool | None = None  # the seq source, fixed by the first payload
        self._started = time.monotonic()
        self._last_t: float | None = None
        self.texts: list[str] | None = None  # committed text deltas, kept for ``iter_text``
        self._dialect: Any = None
        self._frames = 0  # payloads committed or offered
        # Telemetry (None when off). The SDK sent the request before the wrapper was given its
        # stream: the operation is timed from the wrap; the request is read off the stream
        # where the SDK keeps it (``sent_by``).
        self.observation = telemetry.observe("sdk", started=self._started)

    def sent_by(self, stream: Any) -> None:
        """Tell telemetry the URL and body of the request ``stream`` answers, where the SDK
        keeps its HTTP response (openai's and anthropic's streams: ``.response.request``);
        other SDKs (google-genai, ollama, boto3) keep none, and their spans name no request
        model, or the one in a Gemini or Bedrock path."""
        observation = self.observation
        if observation is None:
            return
        request = getattr(getattr(stream, "response", None), "request", None)
        url = getattr(request, "url", None)
        try:
            body = getattr(request, "content", None)
        except Exception:  # a streamed upload the SDK has not read: no body to read a model from
            body = None
        if url is not None:
            observation.url = str(url)
            observation.body = body if isinstance(body, bytes) else None

    def observe(self, obj: Any) -> None:
        payload = self.adapter.payload(obj)
        if payload is not None:
            self._commit(payload)

    def _commit(self, payload: dict[str, Any]) -> None:
        self._frames += 1
        dialect = self._dialect = self.adapter.dialect_for(payload)
        number = dialect.provider_seq(payload)
        if self._by_provider is None:
            self._by_provider = number is not None
            self.message.seq_source = "provider" if number is not None else "position"
        seq = number if self._by_provider and number is not None else self._last_seq + 1
        self._last_seq = seq
        t = time.monotonic() - self._started
        if self._last_t is not None and t - self._last_t > DEFAULT_STALL_SECONDS:
            self.message.warn("stall", f"no event for {t - self._last_t:.1f} s")
        self._last_t = t
        make_frame = getattr(self.adapter, "frame", None)
        if make_frame is not None:  # a dialect that reads more of the frame than its event name
            frame = make_frame(payload)
        else:
            kind = payload.get("type")
            frame = ServerSentEvent(event=kind if isinstance(kind, str) else "message")
        events = dialect.events(frame, payload, seq)
        if self.message.commit(seq, events, t):
            if self.texts is not None:
                self.texts += [event.text for event in events if event.__class__ is TextDelta]
            observation = self.observation
            if observation is not None and any(e.__class__ in OUTPUT_EVENTS for e in events):
                observation.output(self._started + t)

    def end(self) -> None:
        self.message.close()
        self._observed()

    def cancel(self) -> None:
        self.message.close(cancelled=True)
        self._observed()

    def _observed(self) -> None:
        if self.observation is not None:
            name = getattr(self._dialect, "name", None)
            self.observation.end(self.message, frames=self._frames,
                                 dialect=None if name is None else find_dialect(name))

    def fail(self, exc: BaseException) -> None:
        self._fail(exc)
        self._observed()

    def _fail(self, exc: BaseException) -> None:
        if not isinstance(exc, Exception):  # KeyboardInterrupt, task cancellation: the caller
            self.cancel()
            return
        refused = status_error(exc)
        if refused is not None:
            self.message.close(refused)  # as unbroken.stream ends on a final status
            return
        body = self.adapter.error_payload(exc)
        mark = None if body is None else proxy_mark(self.adapter.dialect_for(body), body)
        if mark is not None:
            # An unbroken proxy's own frame: the status it journaled, not the provider's error.
            self.message.warn("proxy_end", f"the proxy ended the stream {mark.status}: "
                                           f"{mark.code}: {mark.message}")
            ended = proxy_end_error(mark)
            if ended is not None:
                ended.__cause__ = exc
            self.message.close(ended, cancelled=ended is None)
            return
        if body is not None and not self.message.closed:
            self._commit(body)
            self.message.close()
            return
        if isinstance(exc, PayloadError):  # a payload the dialect (or the adapter) refused
            self.message.close(exc)
            return
        error: StreamError
        if isinstance(exc, ValueError):
            # The SDK could not read the bytes: malformed JSON (JSONDecodeError, google-genai's
            # UnknownApiResponseError) or a payload its models refuse (pydantic's
            # ValidationError). The stream failed, as a receiver fails on a PayloadError.
            error = PayloadError(f"the SDK could not read the stream: {type(exc).__name__}: {exc}")
        else:
            error = TransportError(f"{type(exc).__name__}: {exc}")
        error.__cause__ = exc
        self.message.close(error)


class TrackedStream(Generic[T]):
    """Iterate it as the SDK stream itself; ``message`` is the ``Message`` built alongside."""

    def __init__(self, stream: Any, adapter: SDKAdapter, *, trace: bool = True) -> None:
        self._tracker = _Tracker(adapter, trace=trace)
        self.message: Message = self._tracker.message
        # A context manager (anthropic's ``messages.stream(...)``) is entered on first use.
        self._manager = stream if not hasattr(stream, "__iter__") else None
        self.stream: Any = None if self._manager is not None else stream
        self._own: Iterator[T] | None = None
        self._tracker.sent_by(stream)

    def __iter__(self) -> Iterator[T]:
        return self._track()

    def iter_text(self, *, graphemes: bool = False) -> Iterator[str]:
        """The text the stream's objects carry, delta by delta, each once (it consumes the
        objects). ``graphemes=True`` cuts only between whole user-perceived characters, as
        ``unbroken.Stream.iter_text`` does; a held one comes out before the SDK's error."""
        if not graphemes:
            return self._texts()
        from ..client.graphemes import whole_clusters  # regex: loaded only by those who ask

        return whole_clusters(self._texts())

    def _texts(self) -> Iterator[str]:
        tracker = self._tracker
        texts = tracker.texts = []
        for _obj in self:
            if texts:
                yield from texts
                texts.clear()

    def __next__(self) -> T:
        if self._own is None:
            self._own = self._track()
        return next(self._own)

    def _track(self) -> Iterator[T]:
        tracker = self._tracker
        if self.stream is None:
            self.stream = self._manager.__enter__()  # type: ignore[union-attr]
            tracker.sent_by(self.stream)
        iterator = iter(self.stream)
        try:
            for obj in iterator:
                tracker.observe(obj)
                yield obj
        except GeneratorExit:
            self.close()
            raise
        except BaseException as exc:
            tracker.fail(exc)
            raise
        tracker.end()

    def close(self) -> None:
        """Stop reading: the message is ``cancelled`` unless it already ended."""
        self._tracker.cancel()
        closer = getattr(self.stream, "close", None)
        if callable(closer):
            closer()
        if self._manager is not None and self.stream is not None:
            manager, self._manager = self._manager, None
            manager.__exit__(None, None, None)

    def __enter__(self) -> TrackedStream[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncTrackedStream(Generic[T]):
    """``async for`` it as the SDK stream itself; ``message`` is the ``Message`` built alongside.

    Leaving an ``async for`` early cancels the message once the event loop finalizes the
    iterator; use ``async with`` (or ``await aclose()``) to make that happen at once.
    """

    def __init__(self, stream: Any, adapter: SDKAdapter, *, trace: bool = True) -> None:
        self._tracker = _Tracker(adapter, trace=trace)
        self.message: Message = self._tracker.message
        self._manager = stream if not hasattr(stream, "__aiter__") else None
        self.stream: Any = None if self._manager is not None else stream
        self._own: AsyncIterator[T] | None = None
        self._closing = False
        self._tracker.sent_by(stream)

    @property
    def observation(self) -> Observation | None:
        """This stream's telemetry, ``None`` when off (``unbroken.telemetry``)."""
        return self._tracker.observation

    def __aiter__(self) -> AsyncIterator[T]:
        return self._track()

    def iter_text(self, *, graphemes: bool = False) -> AsyncIterator[str]:
        """The text the stream's objects carry (see ``TrackedStream.iter_text``)."""
        if not graphemes:
            return self._texts()
        from ..client.graphemes import whole_clusters_async  # regex: loaded only by those who ask

        return whole_clusters_async(self._texts())

    async def _texts(self) -> AsyncIterator[str]:
        tracker = self._tracker
        texts = tracker.texts = []
        async for _obj in self:
            if texts:
                for text in texts:
                    yield text
                texts.clear()

    async def __anext__(self) -> T:
        if self._own is None:
            self._own = self._track()
        return await anext(self._own)

    async def _track(self) -> AsyncIterator[T]:
        tracker = self._tracker
        if self.stream is None:
            self.stream = await self._manager.__aenter__()  # type: ignore[union-attr]
            tracker.sent_by(self.stream)
        try:
            async for obj in self.stream:
                tracker.observe(obj)
                yield obj
        except GeneratorExit:
            await self.aclose()
            raise
        except BaseException as exc:
            tracker.fail(exc)
            raise
        tracker.end()

    async def aclose(self) -> None:
        """Stop reading: the message is ``cancelled`` unless it already ended."""
        self._tracker.cancel()
        # Once only: the loop may finalize an abandoned iterator (which calls this again) while
        # the first call still awaits the SDK stream's cleanup.
        if self._closing:
            return
        self._closing = True
        # The SDKs' stream classes close by ``close()``; google-genai and ollama hand out plain
        # async generators, which close by ``aclose()`` (left open, the connection leaks).
        closer = getattr(self.stream, "close", None) or getattr(self.stream, "aclose", None)
        if callable(closer):
            await closer()
        if self._manager is not None and self.stream is not None:
            manager, self._manager = self._manager, None
            await manager.__aexit__(None, None, None)

    async def __aenter__(self) -> AsyncTrackedStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
