"""``ResumingTransport``: an httpx2 transport under which a proxied stream's body survives a cut.

Any SDK or framework built on httpx2 gets it through ``http_client()`` / ``async_http_client()``
(or ``httpx2.Client(transport=ResumingTransport())``). A POST's streaming response that an
unbroken proxy gave a stream id (``Unbroken-Stream-Id``, and ``Unbroken-Stream-Token`` when it
created the stream) reaches the caller whole frames at a time (``ProxiedBody``). When it breaks
(a transport error, a read that got no byte for ``deadlines.idle`` seconds, a clean end inside a
frame or on the proxy's notice) the transport reads on from ``GET /v1/streams/{id}/events`` with
``Last-Event-ID`` and continues the same body: up to ``retry.attempts`` connections in a row
that bring no frame, within ``deadlines.total``. Then the body ends as the proxy ended it (its
notice, so the SDK raises) or with the transport error. A resume answered 4xx (but 429, which
waits and tries again, as 5xx do) raises ``httpx2.HTTPStatusError`` with that response at
once. Every other response is the inner transport's own, untouched.

Each POST with a JSON body gets an ``Idempotency-Key`` (``idempotency_keys``), so the SDK's own
retry after a cut before the response head attaches to the stream the first attempt started.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2

from ..resumption import (
    IDEMPOTENCY_KEY,
    LAST_EVENT_ID,
    STREAM_ID_HEADER,
    STREAM_TOKEN_HEADER,
    parse_event_id,
)
from .idempotency_keys import keyed
from .policy import Deadlines, Retry, server_retry_delay
from .proxied_body import ProxiedBody, ResumeMismatch

__all__ = ["ResumeMismatch", "ResumingTransport", "async_http_client", "http_client"]

# Arguments of httpx2.Client that configure its default transport; they build the inner one.
_TRANSPORT_ARGS = ("verify", "cert", "trust_env", "http1", "http2", "limits")
_STREAM_ID = STREAM_ID_HEADER.lower().encode()
_LAST_EVENT_ID = LAST_EVENT_ID.lower().encode()
# Request headers a resume does not repeat: it is a GET of the proxy's events, not the POST.
_NOT_RESENT = frozenset({"content-length", "content-type", "transfer-encoding", "accept",
                         "accept-encoding", "host", IDEMPOTENCY_KEY.lower(),
                         LAST_EVENT_ID.lower()})


class ResumingTransport(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """Sync and async: ``inner`` is the transport that does the I/O (an ``httpx2.HTTPTransport``
    or ``AsyncHTTPTransport`` made on first use when ``None``)."""

    def __init__(self, inner: httpx2.BaseTransport | httpx2.AsyncBaseTransport | None = None, *,
                 retry: Retry | None = None, deadlines: Deadlines | None = None) -> None:
        self.retry = retry if retry is not None else Retry()
        self.deadlines = deadlines if deadlines is not None else Deadlines()
        self._sync = inner if isinstance(inner, httpx2.BaseTransport) else None
        self._async = inner if isinstance(inner, httpx2.AsyncBaseTransport) else None
        self._own = inner is None
        self._rng = random.Random()

    # -- sync -----------------------------------------------------------------------------------

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._sync is None:
            if not self._own:
                raise TypeError("ResumingTransport: its inner transport is async; use an "
                                "httpx2.AsyncClient")
            self._sync = httpx2.HTTPTransport()
        _check(request)
        keyed(request)
        response = self._sync.handle_request(request)
        body = self._proxied(request, response)
        if body is None:
            return response
        return _replaced(response, _SyncBody(self, self._sync, request, response, body))

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()

    # -- async ----------------------------------------------------------------------------------

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._async is None:
            if not self._own:
                raise TypeError("ResumingTransport: its inner transport is sync; use an "
                                "httpx2.Client")
            self._async = httpx2.AsyncHTTPTransport()
        _check(request)
        keyed(request)
        response = await self._async.handle_async_request(request)
        body = self._proxied(request, response)
        if body is None:
            return response
        return _replaced(response, _AsyncBody(self, self._async, request, response, body))

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()

    # -- shared ---------------------------------------------------------------------------------

    def _proxied(self, request: httpx2.Request, response: httpx2.Response) -> ProxiedBody | None:
        """The body's state if this is a proxied stream to carry across cuts, else None."""
        if request.method != "POST" or response.status_code != 200:
            return None
        # One pass over the raw head: each Headers lookup decodes and scans all of it.
        stream_id, media_type, encoded = "", b"", False
        for name, value in response.headers.raw:
            name = name.lower()
            if name == _STREAM_ID:
                stream_id = value.decode("latin-1")
            elif name == b"content-type":
                media_type = value
            elif name == b"content-encoding":
                encoded = encoded or value.strip().lower() != b"identity"
        if not stream_id:
            return None
        if b"event-stream" not in media_type and b"ndjson" not in media_type:
            return None
        if encoded:
            return None  # frames are cut in the bytes as sent; the proxy never compresses
        idle = self.deadlines.idle
        timeout = request.extensions.get("timeout")
        if idle is not None and isinstance(timeout, dict):
            # httpcore2 reads the read timeout at the body's first read, after the head: a
            # proxied body that stalls longer than ``idle`` is a cut to resume, not a wait.
            read = timeout.get("read")
            request.extensions["timeout"] = {**timeout,
                                             "read": idle if read is None else min(read, idle)}
        return ProxiedBody(stream_id, ndjson=b"ndjson" in media_type,
                           after=_continues_after(request, stream_id))

    def resume_request(self, request: httpx2.Request, response: httpx2.Response,
                       body: ProxiedBody) -> httpx2.Request:
        """``GET /v1/streams/{id}/events`` after the last frame handed on, with the token and
        the POST's own headers (its credential among them)."""
        headers = [(name, value) for name, value in request.headers.multi_items()
                   if name.lower() not in _NOT_RESENT
                   and not name.lower().startswith("x-stainless")]
        headers += [("accept", "text/event-stream"), (LAST_EVENT_ID, body.last_event_id)]
        token = response.headers.get(STREAM_TOKEN_HEADER)
        if token is not None:
            headers.append((STREAM_TOKEN_HEADER, token))
        # Without a token (a POST that itself continued with Last-Event-ID gets none) the
        # credential repeated from the POST, the one that created the stream, reads it.
        url = request.url.copy_with(path=f"/v1/streams/{body.stream_id}/events", query=None)
        connect, idle = self.deadlines.connect, self.deadlines.idle
        return httpx2.Request("GET", url, headers=headers, extensions={"timeout": {
            "connect": connect, "read": idle, "write": connect, "pool": connect}})

    def pause(self, failures: int, refused: httpx2.Response | None) -> float:
        """Before a resume: none right after a connection that brought frames (the proxy is
        there and holds the rest), else the server's word or the retry backoff."""
        said = server_retry_delay(refused.headers) if refused is not None else None
        if failures == 0 and said is None:
            return 0.0
        return self.retry.delay(failures, server_says=said, rng=self._rng)

    def spent(self, failures: int, started: float) -> bool:
        total = self.deadlines.total
        return failures >= self.retry.attempts or (
            total is not None and time.monotonic() - started >= total)


def _continues_after(request: httpx2.Request, stream_id: str) -> int:
    """The seq a POST with ``Last-Event-ID`` of this stream continues after (else 0)."""
    for name, value in request.headers.raw:  # (a Headers lookup builds a list per call)
        if name.lower() == _LAST_EVENT_ID:
            named = parse_event_id(value.decode("latin-1"))
            return named[1] if named is not None and named[0] == stream_id else 0
    return 0


def _check(request: object) -> None:
    if not isinstance(request, httpx2.Request):
        raise TypeError(f"ResumingTransport is an httpx2 transport; this request is a "
                        f"{type(request).__module__}.{type(request).__name__} (the ollama "
                        f"client, for one, builds an httpx client, not an httpx2 one)")


def _replaced(response: httpx2.Response, stream: httpx2.SyncByteStream | httpx2.AsyncByteStream
              ) -> httpx2.Response:
    return httpx2.Response(response.status_code, headers=response.headers, stream=stream,
                           extensions=response.extensions)


def _sync_stream(response: httpx2.Response) -> httpx2.SyncByteStream:
    stream = response.stream
    assert isinstance(stream, httpx2.SyncByteStream)
    return stream


def _async_stream(response: httpx2.Response) -> httpx2.AsyncByteStream:
    stream = response.stream
    assert isinstance(stream, httpx2.AsyncByteStream)
    return stream


def _final(resumed: httpx2.Response, request: httpx2.Request) -> httpx2.HTTPStatusError:
    """A resume the proxy refused for good (404, 401, 410 ...): raised with its response."""
    return httpx2.HTTPStatusError(
        f"unbroken: resuming the stream was refused: {resumed.status_code}",
        request=request, response=resumed)


def _retried(status: int) -> bool:
    return status == 429 or status >= 500


_BROKEN = "the proxied body ended inside a frame or on the proxy's notice"


class _SyncBody(httpx2.SyncByteStream):
    def __init__(self, owner: ResumingTransport, inner: httpx2.BaseTransport,
                 request: httpx2.Request, response: httpx2.Response, body: ProxiedBody) -> None:
        self._owner, self._inner, self._request = owner, inner, request
        self._head, self._body = response, body
        self._current: httpx2.Response | None = response

    def __iter__(self) -> Iterator[bytes]:
        owner, body = self._owner, self._body
        started, failures = time.monotonic(), 0
        error: Exception = httpx2.RemoteProtocolError(_BROKEN)
        refused: httpx2.Response | None = None
        while True:
            current = self._current
            if current is not None:
                refused = None
                try:
                    if current.status_code == 200:
                        for chunk in _sync_stream(current):
                            out = body.receive(chunk)
                            if out:
                                yield out
                        if body.receive_eof():
                            return
                        error = httpx2.RemoteProtocolError(_BROKEN)
                    elif current.status_code == 204:
                        return  # the stream had ended: nothing more comes
                    else:
                        current.read()
                        refused, error = current, _final(current, self._request)
                        if not _retried(current.status_code):
                            raise error
                except ResumeMismatch:
                    raise
                except httpx2.TransportError as exc:
                    error = exc
                finally:
                    current.close()
                    self._current = None
            failures = 0 if body.progressed else failures + 1
            if owner.spent(failures, started):
                tail = body.give_up()
                if tail:
                    yield tail
                    return
                raise error
            time.sleep(owner.pause(failures, refused))
            request = owner.resume_request(self._request, self._head, body)
            body.resumed()
            try:
                self._current = self._inner.handle_request(request)
            except httpx2.TransportError as exc:
                error = exc

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
            self._current = None


class _AsyncBody(httpx2.AsyncByteStream):
    def __init__(self, owner: ResumingTransport, inner: httpx2.AsyncBaseTransport,
                 request: httpx2.Request, response: httpx2.Response, body: ProxiedBody) -> None:
        self._owner, self._inner, self._request = owner, inner, request
        self._head, self._body = response, body
        self._current: httpx2.Response | None = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        owner, body = self._owner, self._body
        started, failures = time.monotonic(), 0
        error: Exception = httpx2.RemoteProtocolError(_BROKEN)
        refused: httpx2.Response | None = None
        while True:
            current = self._current
            if current is not None:
                refused = None
                try:
                    if current.status_code == 200:
                        async for chunk in _async_stream(current):
                            out = body.receive(chunk)
                            if out:
                                yield out
                        if body.receive_eof():
                            return
                        error = httpx2.RemoteProtocolError(_BROKEN)
                    elif current.status_code == 204:
                        return
                    else:
                        await current.aread()
                        refused, error = current, _final(current, self._request)
                        if not _retried(current.status_code):
                            raise error
                except ResumeMismatch:
                    raise
                except httpx2.TransportError as exc:
                    error = exc
                finally:
                    await current.aclose()
                    self._current = None
            failures = 0 if body.progressed else failures + 1
            if owner.spent(failures, started):
                tail = body.give_up()
                if tail:
                    yield tail
                    return
                raise error
            await anyio.sleep(owner.pause(failures, refused))
            request = owner.resume_request(self._request, self._head, body)
            body.resumed()
            try:
                self._current = await self._inner.handle_async_request(request)
            except httpx2.TransportError as exc:
                error = exc

    async def aclose(self) -> None:
        if self._current is not None:
            await self._current.aclose()
            self._current = None


def http_client(*, retry: Retry | None = None, deadlines: Deadlines | None = None,
                **kwargs: Any) -> httpx2.Client:
    """An ``httpx2.Client`` over ``ResumingTransport``; ``kwargs`` as for ``httpx2.Client``
    (``verify``, ``http2``, ``limits`` ... configure the inner transport, ``transport=`` is
    the inner transport itself)."""
    inner = kwargs.pop("transport", None)
    options = {name: kwargs.pop(name) for name in _TRANSPORT_ARGS if name in kwargs}
    if "trust_env" in options:
        kwargs["trust_env"] = options["trust_env"]  # the client reads it too (proxy variables)
    if inner is None:
        inner = httpx2.HTTPTransport(**options)
    transport = ResumingTransport(inner, retry=retry, deadlines=deadlines)
    return httpx2.Client(transport=transport, **kwargs)


def async_http_client(*, retry: Retry | None = None, deadlines: Deadlines | None = None,
                      **kwargs: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` over ``ResumingTransport``; ``kwargs`` as for ``http_client``."""
    inner = kwargs.pop("transport", None)
    options = {name: kwargs.pop(name) for name in _TRANSPORT_ARGS if name in kwargs}
    if "trust_env" in options:
        kwargs["trust_env"] = options["trust_env"]
    if inner is None:
        inner = httpx2.AsyncHTTPTransport(**options)
    transport = ResumingTransport(inner, retry=retry, deadlines=deadlines)
    return httpx2.AsyncClient(transport=transport, **kwargs)
