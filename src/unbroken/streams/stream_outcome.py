"""How a producer journals its stream's outcome: values made from its receiver's ``Message``.

``usage_fields`` and ``error_fields`` are the message's usage and error as the JSON-able values of
``StreamState``; ``closing_error`` is the mark of the one error frame the producer adds when a
stream ends without its upstream finishing it (interrupted, cancelled, malformed).

Apart from ``upstream.py`` because these are decisions over values, with no I/O and no timing:
the producer is the loop that reads the upstream and submits frames, and calls these as it
builds a state or writes the end.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProviderError, StreamError
from ..finish import Status
from ..message import Message
from ..resumption import PROXY_MESSAGE_PREFIX, ProxyMark

__all__ = ["closing_error", "error_fields", "usage_fields"]


def closing_error(message: Message, stop_reason: str | None) -> ProxyMark | None:
    """The mark of the error frame that ends a stream which did not finish (its code, the
    status journaled with it, a message for people), from its message's status and why the
    producer stopped (``None``: the upstream ended it, or ``"cancelled"``); ``None`` when no
    frame is added (a finish, or the provider's own error). The stream has ended, so a
    reconnect reads nothing more: never ``resumable``."""
    status = message.status
    code: str
    if status is Status.INTERRUPTED and stop_reason not in (None, "cancelled"):
        code, detail = "proxy_shutdown", "the proxy shut down before the stream finished"
    elif status is Status.INTERRUPTED:
        cause = f" ({message.error})" if message.error is not None else ""
        code = "upstream_interrupted"
        detail = f"the upstream stream broke before it finished{cause}"
    elif status is Status.CANCELLED:
        code, detail = "stream_cancelled", "the stream was cancelled"
    elif status is Status.FAILED and not isinstance(message.error, ProviderError):
        code, detail = "upstream_malformed", f"the upstream stream was malformed ({message.error})"
    else:
        return None
    return ProxyMark(code=code, status=status.value, resumable=False,
                     message=PROXY_MESSAGE_PREFIX + detail)


def usage_fields(usage: Any) -> dict[str, Any] | None:
    if usage is None:
        return None
    fields = ("input_tokens", "output_tokens", "total_tokens", "reasoning_tokens",
              "cached_tokens")
    return {name: getattr(usage, name) for name in fields if getattr(usage, name) is not None}


def error_fields(error: StreamError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    if isinstance(error, ProviderError):
        event = error.event
        return {"type": event.type, "message": event.message, "retryable": event.retryable}
    return {"type": type(error).__name__, "message": str(error)}
