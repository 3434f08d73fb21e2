"""OpenAI Chat Completions streaming (``POST /v1/chat/completions`` with ``"stream": true``).

Each SSE event (no ``event:`` name) carries one ``chat.completion.chunk``; ``data: [DONE]`` ends
the body. Only choice 0 is the message (``n > 1`` streams interleave other choices; they are
passed through, never mixed into the text). With ``stream_options.include_usage`` a last chunk has
``"choices": []`` and the usage. OpenAI-compatible servers add ``reasoning_content`` (DeepSeek,
vLLM) or ``reasoning`` (OpenRouter, Ollama) deltas, and report failures as a chunk holding an
``error`` object. Mistral's reasoning models send ``content`` as a list of typed parts: ``text``
parts are text, a ``thinking`` part holds a list of text parts that are reasoning. OpenRouter
reports an error mid-stream as a chunk with both an ``error`` object and a choice whose
``finish_reason`` is ``"error"``; Azure OpenAI sends ``prompt_filter_results`` in a chunk with no
choices and ``content_filter_results`` beside each choice (passed through, its finish reason is
``content_filter``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from ..events import (
    Event,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from ..finish import FinishReason, Status
from . import genai_messages as genai
from .base import DONE, NOTHING, PASS, SSEDialect, count, error_event, finish, marked_error
from .routes import Provider, Route

__all__ = [
    "EVENT_TYPES",
    "FINISH_REASONS",
    "OPENAI",
    "RETRYABLE_ERRORS",
    "OpenAIChatDialect",
    "is_usage_only_chunk",
    "with_usage_requested",
]

OPENAI: Final = Provider(name="openai", default_origin="https://api.openai.com", fallback=True)
"""OpenAI's origin, shared with the Responses dialect; requests no provider claims go here."""

EVENT_TYPES: Final[Mapping[str, str]] = {
    "chat.completion.chunk": "chunk",  # choices and/or usage
    "error": "error",  # a chunk holding an error object
    "[DONE]": "done",
    # fields of choice 0's delta
    "delta/content": "content",
    "delta/reasoning_content": "reasoning",
    "delta/reasoning": "reasoning",
    "delta/tool_calls": "tool_calls",
    "delta/function_call": "function_call",  # legacy, before tool_calls
    "delta/role": NOTHING,  # always "assistant"
    "delta/refusal": PASS,
    "delta/audio": PASS,
}
"""Every documented frame kind and delta field: its handler, or ``PASS``."""

FINISH_REASONS: Final[Mapping[str, tuple[Status, FinishReason]]] = {
    "stop": (Status.COMPLETED, FinishReason.STOP),
    "tool_calls": (Status.COMPLETED, FinishReason.TOOL_CALLS),
    "function_call": (Status.COMPLETED, FinishReason.TOOL_CALLS),
    "length": (Status.TRUNCATED, FinishReason.LENGTH),
    "content_filter": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "error": (Status.FAILED, FinishReason.ERROR),  # OpenRouter, with an error object
}

RETRYABLE_ERRORS: Final = frozenset({"server_error", "rate_limit_exceeded"})


class OpenAIChatDialect(SSEDialect):
    name = "openai-chat"
    route = Route(provider=OPENAI, paths=("/v1/chat/completions",))
    genai_provider = "openai"

    @staticmethod
    def usage_request(body: bytes) -> bytes | None:
        return with_usage_requested(body)

    @staticmethod
    def genai_input(body: dict[str, Any]) -> genai.GenAIInput:
        """``messages``: ``system``/``developer`` ones are the instructions; a ``tool`` message
        answers ``tool_call_id``; an assistant's ``tool_calls`` are calls."""
        return genai.chat_messages(body.get("messages"), _genai_content, ("system", "developer"))

    def __init__(self) -> None:
        super().__init__()
        self._handlers = self._bind(EVENT_TYPES)
        # PASS fields take the same road as undocumented ones: "delta/<field>" pass-through.
        parts = self._bind_parts("delta", EVENT_TYPES)
        self._deltas = self._shared("deltas", lambda: {
            key: handler
            for key, handler in parts.items()
            if handler is not None and EVENT_TYPES["delta/" + key] != PASS
        })
        self._quiet = self._shared("quiet", lambda: frozenset(
            key for key, handler in parts.items() if handler is None))

    def _events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        if payload is DONE:
            kind = "[DONE]"
        elif "choices" in payload or "usage" in payload:
            kind = "chat.completion.chunk"
        elif payload.get("error"):
            kind = "error"
        else:
            kind = payload.get("object")
            kind = kind if isinstance(kind, str) and kind else "chunk"
            return [UnknownEvent(seq=seq, type=kind, raw=payload)]
        out = self._handlers[kind](self, payload, seq)
        return out if out else [UnknownEvent(seq=seq, type=kind, raw=payload)]

    def _done(self, payload: Any, seq: int) -> list[Event]:
        return [StreamEnd(seq=seq, marker="[DONE]")]

    def _chunk(self, payload: Any, seq: int) -> list[Event]:
        out = [] if self._started else self._start(seq, payload.get("id"), payload.get("model"))
        end: list[Event] = []
        for choice in payload.get("choices") or ():
            if choice.get("index", 0) != 0:
                out.append(UnknownEvent(seq=seq, type="choice", raw=payload))
                continue
            delta = choice.get("delta")
            if delta:
                deltas = self._deltas
                for key, value in delta.items():
                    if not value:  # null, "" and [] say nothing
                        continue
                    handler = deltas.get(key)
                    if handler is not None:
                        out += handler(self, payload, value, seq)
                    elif key not in self._quiet:  # undocumented (or PASS) field
                        out.append(UnknownEvent(seq=seq, type="delta/" + key, raw=payload))
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                end.append(finish(FINISH_REASONS, reason, seq))
        usage = payload.get("usage")
        if usage:
            out.append(_usage(usage, seq))
        if payload.get("error"):
            # OpenRouter: an error in a chunk that still has choices; its finish reason
            # ("error") says no more than the error does.
            return out + self._error(payload, seq)
        return out + end if end else out

    def _error(self, payload: Any, seq: int) -> list[Event]:
        error = payload["error"]
        if not isinstance(error, dict):
            return [error_event(seq, "error", str(error), False, payload)]
        code, kind = error.get("code"), error.get("type")
        if type(code) is int:  # OpenRouter: the HTTP status the error would have had
            retryable = code == 429 or code >= 500
            code = str(code)
        else:
            retryable = False
        names = [name for name in (code, kind) if isinstance(name, str) and name]
        retryable = retryable or any(name in RETRYABLE_ERRORS for name in names)
        type_ = names[0] if names else "error"
        return [error_event(seq, type_, error.get("message"), retryable, payload)]

    # -- delta fields of choice 0 ---------------------------------------------------------------

    def _part_content(self, payload: Any, value: Any, seq: int) -> list[Event]:
        if isinstance(value, str):
            return [TextDelta(seq=seq, text=value)]
        if not isinstance(value, list):
            return [UnknownEvent(seq=seq, type="delta/content", raw=payload)]
        out: list[Event] = []
        for part in value:
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if isinstance(text, str) and text:
                    out.append(TextDelta(seq=seq, text=text))
            elif kind == "thinking":
                for inner in part.get("thinking") or ():
                    text = inner.get("text") if inner.get("type") == "text" else None
                    if isinstance(text, str) and text:
                        out.append(ReasoningDelta(seq=seq, text=text))
            else:  # an image part, a reference ...: passed through, not guessed at
                out.append(UnknownEvent(seq=seq, type=f"delta/content/{kind}", raw=payload))
        return out

    def _part_reasoning(self, payload: Any, value: Any, seq: int) -> list[Event]:
        if isinstance(value, str):
            return [ReasoningDelta(seq=seq, text=value)]
        return [UnknownEvent(seq=seq, type="delta/reasoning", raw=payload)]

    def _part_tool_calls(self, payload: Any, calls: Any, seq: int) -> list[Event]:
        out: list[Event] = []
        for position, call in enumerate(calls):
            index = call.get("index")
            function = call.get("function") or {}
            call_id, name = call.get("id"), function.get("name")
            arguments = function.get("arguments")
            if not (call_id or name or arguments):
                continue
            out.append(
                ToolCallDelta(
                    seq=seq,
                    index=index if type(index) is int else position,
                    id=call_id or None,
                    name=name or None,
                    arguments=arguments if isinstance(arguments, str) else "",
                )
            )
        return out

    def _part_function_call(self, payload: Any, function: Any, seq: int) -> list[Event]:
        name, arguments = function.get("name"), function.get("arguments")
        if not (name or arguments):
            return []
        arguments = arguments if isinstance(arguments, str) else ""
        return [ToolCallDelta(seq=seq, index=0, name=name or None, arguments=arguments)]

    # -- the proxy's own frames and error bodies (what the mark says: resumption.py) ------------

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """A chunk with an ``error`` object (the OpenAI SDK raises ``APIError`` with that
        object as ``body``), the mark inside it under ``domain``."""
        return None, {"error": {"message": message, "type": "server_error", "param": None,
                                "code": mark["code"], domain: dict(mark)}}

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        error = payload.get("error") if payload.__class__ is dict else None
        return None if error is None else marked_error(error, domain)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}



def _usage(usage: Any, seq: int) -> Usage:
    completion = usage.get("completion_tokens_details")
    prompt = usage.get("prompt_tokens_details")
    return Usage(
        seq=seq,
        input_tokens=count(usage.get("prompt_tokens")),
        output_tokens=count(usage.get("completion_tokens")),
        total_tokens=count(usage.get("total_tokens")),
        reasoning_tokens=count(completion.get("reasoning_tokens")) if completion else None,
        cached_tokens=count(prompt.get("cached_tokens")) if prompt else None,
    )


# -- asking for usage -------------------------------------------------------------------------
# Chat Completions reports usage in a stream only when the request says
# ``stream_options: {"include_usage": true}``; the answer then has one more chunk, with
# ``"choices": []`` and the usage, before ``[DONE]``.

_USAGE_OPTION: Final = b'"stream_options":{"include_usage":true},'


def with_usage_requested(body: bytes) -> bytes | None:
    """The streaming request ``body`` asking for usage, or ``None`` when it needs no change
    (it set ``stream_options.include_usage`` itself, true or false) or is not a streaming JSON
    object (the upstream judges it as it is).

    Without ``stream_options`` the option is written right after the opening brace, so every
    other byte of the body is the client's own; a ``stream_options`` object (or ``null``)
    without ``include_usage`` is completed and the body re-serialized, unless a number in it
    would not survive that (then the body is left alone).
    """
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("stream") is not True:
        return None
    if not body.lstrip().startswith(b"{"):  # a BOM, or UTF-16: not edited byte-wise
        return None
    options = payload.get("stream_options")
    if "stream_options" not in payload:
        start = body.index(b"{") + 1
        return body[:start] + _USAGE_OPTION + body[start:]
    if options is not None and not isinstance(options, dict):
        return None
    if options is not None and "include_usage" in options:
        return None
    payload["stream_options"] = {**(options or {}), "include_usage": True}
    try:
        return json.dumps(payload, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode()
    except ValueError:  # a number too large for a float: re-serializing would change it
        return None


def is_usage_only_chunk(data: bytes) -> bool:
    """Whether an SSE data payload is the usage-only chunk (``"choices": []``, usage set)."""
    try:
        payload = json.loads(data)
    except ValueError:
        return False
    return (isinstance(payload, dict) and payload.get("choices") == []
            and isinstance(payload.get("usage"), dict))


def _genai_content(item: dict[str, Any]) -> list[dict[str, Any]]:
    content = item.get("content")
    if isinstance(content, str):
        return genai.text(content)
    # content parts: text, image_url, input_audio, file, refusal
    return [genai.text_or_other(part, ("text",)) for part in genai.items(content)]
