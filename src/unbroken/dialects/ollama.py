"""Ollama's native streaming API: newline-delimited JSON (``application/x-ndjson``).

``/api/chat`` lines carry ``message.content``, ``message.thinking`` and whole
``message.tool_calls`` (arguments are an object, never fragments); ``/api/generate`` lines carry
``response`` and ``thinking`` at the top level. The last line has ``"done": true``, the counts and
``done_reason``. Ollama leaves ``done_reason`` out when the runner lost its connection, so a done
line without one is no finish reason at all (the stream ends interrupted). An error mid-stream is a
line ``{"error": "..."}``; the HTTP status stays 200.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from .._jsonparse import dumps_compact, loads
from ..errors import PayloadError
from ..events import (
    Event,
    Finish,
    ReasoningDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UnknownEvent,
    Usage,
)
from ..finish import FinishReason, Status
from ..framing import NDJSON, ServerSentEvent
from . import genai_messages as genai
from .base import NOTHING, PASS, DialectBase, count, error_event, finish
from .routes import AsksStream, Provider, Route

__all__ = ["EVENT_TYPES", "FINISH_REASONS", "OllamaDialect"]

EVENT_TYPES: Final[Mapping[str, str]] = {
    "error": "error",  # {"error": "..."}: the whole line
    "message": "message",  # /api/chat
    "thinking": "thinking",  # /api/generate
    "response": "response",  # /api/generate
    "image": PASS,  # image generation: the picture, with "completed" / "total" progress
    "done": "done",  # true on the last line
    # fields of "message"
    "message/content": "content",
    "message/thinking": "thinking",
    "message/tool_calls": "tool_calls",
    "message/role": NOTHING,  # always "assistant"
    "message/images": PASS,
    "message/tool_name": PASS,
}
"""Every documented line field and message field: its handler, or ``PASS``."""

FINISH_REASONS: Final[Mapping[str, tuple[Status, FinishReason]]] = {
    "stop": (Status.COMPLETED, FinishReason.STOP),
    "length": (Status.TRUNCATED, FinishReason.LENGTH),
    # a bare load / unload request: nothing was generated, yet it ended as asked
    "load": (Status.COMPLETED, FinishReason.OTHER),
    "unload": (Status.COMPLETED, FinishReason.OTHER),
}

STOP_WITH_TOOL_CALLS: Final = (Status.COMPLETED, FinishReason.TOOL_CALLS)
"""``stop`` after the model asked for tools."""


class OllamaDialect(DialectBase):
    name = "ollama"
    framing = NDJSON
    media_type = "application/x-ndjson"
    # Both generation endpoints stream the same lines (text in message.content or in response).
    route = Route(
        provider=Provider(name="ollama", default_origin="http://127.0.0.1:11434",
                          prefixes=("/api/",)),
        paths=("/api/chat", "/api/generate"),
        asks=AsksStream.BODY_UNLESS_FALSE,
    )
    # Not among the conventions' well-known providers: its own name, as they allow.
    genai_provider = "ollama"
    genai_path_operations = MappingProxyType({"/api/generate": "text_completion"})
    _state = ("_started", "_calls")

    @staticmethod
    def genai_input(body: dict[str, Any]) -> genai.GenAIInput:
        """``/api/chat``: ``messages`` (a ``system`` one is instructions, ``tool`` answers a
        call, ``images`` are parts of type ``image``); ``/api/generate``: ``prompt`` and
        ``system``."""
        if "prompt" in body:
            return [genai.message("user", genai.text(body.get("prompt")))], \
                genai.text(body.get("system"))
        return genai.chat_messages(body.get("messages"), _genai_content, ("system",))

    def __init__(self) -> None:
        super().__init__()
        self._calls = 0  # tool calls so far: the index of the next one
        self._first_call: dict[int, int] = {}  # seq -> index of that frame's first call
        # Line fields are not exclusive ("done" comes with the last text); table order is the
        # order of the events in a frame, so the end comes last.
        cls = type(self)
        self._fields = self._shared("fields", lambda: {
            key: getattr(cls, "_field_pass" if value == PASS else "_" + value)
            for key, value in EVENT_TYPES.items()
            if "/" not in key and key != "error"
        })
        parts = self._bind_parts("message", EVENT_TYPES)
        self._message_fields = self._shared("message_fields", lambda: {
            key: handler
            for key, handler in parts.items()
            if handler is not None and EVENT_TYPES["message/" + key] != PASS
        })
        self._quiet = self._shared("quiet", lambda: frozenset(
            key for key, handler in parts.items() if handler is None))

    def load(self, frame: Any) -> Any:
        if frame.__class__ is ServerSentEvent:  # a line served as SSE (the proxy's events route)
            try:
                value = loads(frame.data)
            except ValueError as exc:
                raise PayloadError(f"ollama: malformed JSON in an SSE frame: {exc}") from exc
        else:
            value = frame.value
        if type(value) is not dict:
            raise PayloadError(f"ollama: line is JSON {type(value).__name__}, expected an object")
        return value

    def _rewind(self, seq: int) -> None:
        # a replayed frame numbers its calls as it did the first time
        self._calls = self._first_call.get(seq, self._calls)

    def _events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        if payload.get("error"):
            return self._error(payload, seq)
        out = [] if self._started else self._start(seq, None, payload.get("model"))
        for key, handler in self._fields.items():
            value = payload.get(key)
            if value:
                out += handler(self, payload, value, seq)
        return out if out else [UnknownEvent(seq=seq, type="line", raw=payload)]

    def _error(self, payload: Any, seq: int) -> list[Event]:
        error = payload["error"]
        message = error if isinstance(error, str) else dumps_compact(error)
        # Ollama says nothing about the cause, so nothing marks it as worth a retry.
        return [error_event(seq, "error", message, False, payload)]

    def _field_pass(self, payload: Any, value: Any, seq: int) -> list[Event]:
        return [UnknownEvent(seq=seq, type="line", raw=payload)]

    def _message(self, payload: Any, message: Any, seq: int) -> list[Event]:
        out: list[Event] = []
        fields = self._message_fields
        for key, value in message.items():
            if not value:
                continue
            handler = fields.get(key)
            if handler is not None:
                out += handler(self, payload, value, seq)
            elif key not in self._quiet:  # undocumented (or PASS) field
                out.append(UnknownEvent(seq=seq, type="message/" + key, raw=payload))
        return out

    def _response(self, payload: Any, text: Any, seq: int) -> list[Event]:
        return [TextDelta(seq=seq, text=text)] if isinstance(text, str) else []

    def _thinking(self, payload: Any, text: Any, seq: int) -> list[Event]:
        return [ReasoningDelta(seq=seq, text=text)] if isinstance(text, str) else []

    def _part_content(self, payload: Any, text: Any, seq: int) -> list[Event]:
        return [TextDelta(seq=seq, text=text)] if isinstance(text, str) else []

    def _part_thinking(self, payload: Any, text: Any, seq: int) -> list[Event]:
        return [ReasoningDelta(seq=seq, text=text)] if isinstance(text, str) else []

    def _part_tool_calls(self, payload: Any, calls: Any, seq: int) -> list[Event]:
        self._first_call.setdefault(seq, self._calls)
        out: list[Event] = []
        for call in calls:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if isinstance(arguments, str):  # some models' templates leave the JSON as text
                text = arguments
            else:
                text = dumps_compact(arguments if arguments is not None else {})
            out.append(
                ToolCallDelta(
                    seq=seq,
                    index=self._calls,
                    id=call.get("id") or None,
                    name=function.get("name") or None,
                    arguments=text,
                )
            )
            self._calls += 1
        return out

    def _done(self, payload: Any, done: Any, seq: int) -> list[Event]:
        if done is not True:
            return []
        out: list[Event] = []
        usage = Usage(
            seq=seq,
            input_tokens=count(payload.get("prompt_eval_count")),
            output_tokens=count(payload.get("eval_count")),
        )
        if usage != Usage(seq=seq):
            out.append(usage)
        reason = payload.get("done_reason")
        if isinstance(reason, str) and reason:
            if reason == "stop" and self._calls:
                status, normalized = STOP_WITH_TOOL_CALLS
                out.append(Finish(seq=seq, status=status, reason=normalized, raw=reason))
            else:
                out.append(finish(FINISH_REASONS, reason, seq))
        out.append(StreamEnd(seq=seq, marker="done"))
        return out

    # -- the proxy's own frames and error bodies (what the mark says: resumption.py) ------------

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """Ollama's ``{"error": "..."}`` line. Its error is a bare string, and that string is
        all the ollama client keeps (``ResponseError.error``), so the mark is written at the
        end of the text: ``[unbroken code=...; status=...; resumable=...]``."""
        fields = "; ".join(f"{key}={value}" for key, value in mark.items())
        return None, {"error": f"{message} [{domain} {fields}]"}

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        error = payload.get("error") if payload.__class__ is dict else None
        if error.__class__ is not str or not error.endswith("]"):
            return None
        message, opened, fields = error[:-1].rpartition(f" [{domain} ")
        if not opened:
            return None
        found = {key: value for key, _, value in (item.partition("=")
                                                  for item in fields.split("; "))}
        return {**found, "message": message}

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": message}


def _genai_content(item: dict[str, Any]) -> list[dict[str, Any]]:
    parts = genai.text(item.get("content")) + genai.reasoning(item.get("thinking"))
    images = item.get("images")
    return parts + [genai.other("image") for _ in images] if isinstance(images, list) else parts
