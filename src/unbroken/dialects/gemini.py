"""Gemini ``streamGenerateContent?alt=sse`` (Gemini API and Vertex AI).

Each SSE event (no ``event:`` name) holds one ``GenerateContentResponse``: ``candidates`` with
``content.parts`` and a ``finishReason`` on the last chunk, ``usageMetadata``, and
``promptFeedback.blockReason`` when the prompt itself was blocked (then there are no candidates).
There is no end sentinel: the finish reason is the only sign of a complete answer, and some models
put ``finishReason: STOP`` on every chunk, so every finish reason here is provisional
(``Finish.final=False``): content may still follow it, and the last one stands. A function call
arrives whole (``functionCall.args`` an object, or no args at all), or, with Vertex AI's
``streamFunctionCallArguments``, as a named part followed by ``partialArgs`` parts until one
without ``willContinue`` (``gemini_arguments.py`` writes those as JSON text). Without
``alt=sse`` the body is one JSON array, which this dialect refuses with a clear ``PayloadError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from .._jsonparse import dumps_compact
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
from . import genai_messages as genai
from .base import DONE, PASS, SSEDialect, count, error_event, finish
from .gemini_arguments import StreamedArguments
from .routes import AsksStream, Provider, Route

__all__ = [
    "BLOCKED_PROMPT",
    "EVENT_TYPES",
    "FINISH_REASONS",
    "RETRYABLE_STATUSES",
    "GeminiDialect",
]

EVENT_TYPES: Final[Mapping[str, str]] = {
    "candidates": "candidates",
    "usageMetadata": "usage",
    "promptFeedback": "prompt_feedback",
    "error": "error",
    # parts of candidate 0's content, by the field that holds the part's data
    "part/text": "text",  # with "thought": true it is reasoning
    "part/functionCall": "function_call",
    "part/thoughtSignature": "signature",  # a part that carries only a signature
    "part/functionResponse": PASS,
    "part/inlineData": PASS,
    "part/fileData": PASS,
    "part/executableCode": PASS,
    "part/codeExecutionResult": PASS,
    "part/toolCall": PASS,  # a server-side tool call, run by Google
    "part/toolResponse": PASS,
    "part/videoMetadata": PASS,
}
"""Every documented frame field and part kind: its handler, or ``PASS``."""

FINISH_REASONS: Final[Mapping[str, tuple[Status, FinishReason]]] = {
    "STOP": (Status.COMPLETED, FinishReason.STOP),
    "MAX_TOKENS": (Status.TRUNCATED, FinishReason.LENGTH),
    "SAFETY": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "RECITATION": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "BLOCKLIST": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "PROHIBITED_CONTENT": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "SPII": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "IMAGE_SAFETY": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "IMAGE_PROHIBITED_CONTENT": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "IMAGE_RECITATION": (Status.FILTERED, FinishReason.CONTENT_FILTER),
    "MALFORMED_FUNCTION_CALL": (Status.FAILED, FinishReason.ERROR),
    "UNEXPECTED_TOOL_CALL": (Status.FAILED, FinishReason.ERROR),
    "TOO_MANY_TOOL_CALLS": (Status.FAILED, FinishReason.ERROR),
    # Every other reason is completed / other, the raw one kept. Listed so the choice is
    # visible, the later reasons below included.
    "FINISH_REASON_UNSPECIFIED": (Status.COMPLETED, FinishReason.OTHER),
    "OTHER": (Status.COMPLETED, FinishReason.OTHER),
    "LANGUAGE": (Status.COMPLETED, FinishReason.OTHER),
    "NO_IMAGE": (Status.COMPLETED, FinishReason.OTHER),
    "IMAGE_OTHER": (Status.COMPLETED, FinishReason.OTHER),
    "MISSING_THOUGHT_SIGNATURE": (Status.COMPLETED, FinishReason.OTHER),
    "MALFORMED_RESPONSE": (Status.COMPLETED, FinishReason.OTHER),
    "ESCALATION": (Status.COMPLETED, FinishReason.OTHER),
    "PUP_LIMITED_DISABLED": (Status.COMPLETED, FinishReason.OTHER),
    "CONTINUATION": (Status.COMPLETED, FinishReason.OTHER),
    "MODEL_ARMOR": (Status.COMPLETED, FinishReason.OTHER),
}

STOP_WITH_FUNCTION_CALL: Final = (Status.COMPLETED, FinishReason.TOOL_CALLS)
"""STOP after a functionCall part: the turn ends by asking the client to run a function."""

BLOCKED_PROMPT: Final = (Status.FILTERED, FinishReason.CONTENT_FILTER)
"""``promptFeedback.blockReason``, whatever its value: the prompt was refused."""

FieldHandler = Callable[[Any, Any, int, list[Event], list[Event]], None]

RETRYABLE_STATUSES: Final = frozenset(
    {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"}
)


class GeminiDialect(SSEDialect):
    name = "gemini"
    route = Route(
        provider=Provider(name="gemini", default_origin="https://generativelanguage.googleapis.com",
                          prefixes=("/v1beta/", "/v1alpha/", "/upload/"),
                          headers=("x-goog-api-key",)),
        # /v1beta/models/gemini-x:streamGenerateContent (google-genai 3 uses /v1/)
        pattern=re.compile(r"/(?:v1|v1beta|v1alpha)/(?:tunedModels|models)/(?P<model>[^/]+)"
                           r":(?P<method>[A-Za-z]+)"),
        stream_methods=frozenset({"streamGenerateContent"}),
        asks=AsksStream.QUERY_ALT_SSE,
    )
    end_marker = False
    json_array_body = (
        "the body is a JSON array, not Server-Sent Events: Gemini streams as SSE only with "
        "?alt=sse (streamGenerateContent without it returns one array)"
    )
    ids_when_accepted = True
    # The Gemini API (generativelanguage); the conventions name its operation generate_content.
    genai_provider = "gcp.gemini"
    genai_operation = "generate_content"
    _state = ("_started", "_calls", "_replaying")

    @staticmethod
    def genai_input(body: dict[str, Any]) -> genai.GenAIInput:
        """``systemInstruction`` and ``contents`` (role ``model`` is the assistant): parts of
        text (``thought: true`` is reasoning), ``functionCall``, ``functionResponse``; inline
        or file data by their field name."""
        system = body.get("systemInstruction", body.get("system_instruction"))
        instructions = [_genai_part(part) for part in
                        genai.items(system.get("parts") if isinstance(system, dict) else None)]
        messages = []
        for item in genai.items(body.get("contents")):
            role = item.get("role")
            messages.append(genai.message("assistant" if role == "model" else role or "user",
                                          [_genai_part(p) for p in genai.items(item.get("parts"))]))
        return messages, instructions

    def __init__(self) -> None:
        super().__init__()
        self._calls = 0  # function calls so far: the index of the next one
        self._first_call: dict[int, int] = {}  # seq -> index of that frame's first call
        self._replaying = False  # parsing a duplicate frame, for the trace only
        # the call whose arguments are streamed (Vertex partialArgs) and not ended yet
        self._streamed: StreamedArguments | None = None
        self._streamed_call: tuple[int, str | None, str | None] = (0, None, None)  # index, id, name
        # Top-level fields are not exclusive: one chunk may hold candidates, usage and feedback.
        cls = type(self)
        self._fields: dict[str, FieldHandler] = self._shared("fields", lambda: {
            key: getattr(cls, "_" + value) for key, value in EVENT_TYPES.items() if "/" not in key
        })
        self._parts = self._shared("parts", lambda: {
            key: handler
            for key, handler in self._bind_parts("part", EVENT_TYPES).items()
            if EVENT_TYPES["part/" + key] != PASS
        })

    def _not_an_object(self, payload: Any) -> str:
        if isinstance(payload, list):
            return (
                "gemini: event data is a JSON array (the body of streamGenerateContent without "
                "alt=sse?); stream with ?alt=sse to get one response object per event"
            )
        return super()._not_an_object(payload)

    def _rewind(self, seq: int) -> None:
        # a replayed frame numbers its calls as it did the first time
        self._calls = self._first_call.get(seq, self._calls)
        self._replaying = True

    def _events(self, frame: Any, payload: Any, seq: int) -> list[Event]:
        if payload is DONE:  # not Gemini's, but some relays add it
            return [StreamEnd(seq=seq, marker="[DONE]")]
        out: list[Event] = (
            []
            if self._started
            else self._start(seq, payload.get("responseId"), payload.get("modelVersion"))
        )
        end: list[Event] = []
        for key, handler in self._fields.items():
            if key in payload:
                handler(self, payload, seq, out, end)
        out += end
        return out if out else [UnknownEvent(seq=seq, type="response", raw=payload)]

    def _candidates(self, payload: Any, seq: int, out: list[Event], end: list[Event]) -> None:
        for candidate in payload["candidates"] or ():
            if candidate.get("index", 0) != 0:
                out.append(UnknownEvent(seq=seq, type="candidate", raw=payload))
                continue
            content = candidate.get("content")
            for part in (content.get("parts") if content else None) or ():
                if "text" in part:
                    out += self._part_text(payload, part, seq)
                    continue
                for key in part:
                    handler = self._parts.get(key)
                    if handler is not None:
                        out += handler(self, payload, part, seq)
                        break
                else:
                    name = next(iter(part), "empty")
                    out.append(UnknownEvent(seq=seq, type="part/" + name, raw=payload))
            reason = candidate.get("finishReason")
            if isinstance(reason, str) and reason:
                if reason == "STOP" and self._calls:
                    status, normalized = STOP_WITH_FUNCTION_CALL
                    end.append(
                        Finish(seq=seq, status=status, reason=normalized, raw=reason, final=False)
                    )
                else:
                    end.append(finish(FINISH_REASONS, reason, seq, final=False))

    def _usage(self, payload: Any, seq: int, out: list[Event], end: list[Event]) -> None:
        usage = payload["usageMetadata"]
        if not usage:
            return
        out.append(
            Usage(
                seq=seq,
                input_tokens=count(usage.get("promptTokenCount")),
                output_tokens=count(usage.get("candidatesTokenCount")),
                total_tokens=count(usage.get("totalTokenCount")),
                reasoning_tokens=count(usage.get("thoughtsTokenCount")),
                cached_tokens=count(usage.get("cachedContentTokenCount")),
            )
        )

    def _prompt_feedback(self, payload: Any, seq: int, out: list[Event], end: list[Event]) -> None:
        reason = (payload["promptFeedback"] or {}).get("blockReason")
        if isinstance(reason, str) and reason:
            status, normalized = BLOCKED_PROMPT
            end.append(Finish(seq=seq, status=status, reason=normalized, raw=reason, final=False))

    def _error(self, payload: Any, seq: int, out: list[Event], end: list[Event]) -> None:
        error = payload["error"]
        if not isinstance(error, dict):
            out.append(error_event(seq, "error", str(error), False, payload))
            return
        status, code = error.get("status"), error.get("code")
        retryable = (
            status in RETRYABLE_STATUSES
            or code == 429
            or (type(code) is int and 500 <= code <= 599)
        )
        type_ = status if isinstance(status, str) and status else str(code or "error")
        out.append(error_event(seq, type_, error.get("message"), retryable, payload))

    # -- parts of candidate 0 -------------------------------------------------------------------

    def _part_text(self, payload: Any, part: Any, seq: int) -> list[Event]:
        text, signature = part.get("text"), part.get("thoughtSignature")
        text = text if isinstance(text, str) else ""
        signature = signature if isinstance(signature, str) and signature else None
        if part.get("thought") is True:
            if not text and signature is None:
                return []
            return [ReasoningDelta(seq=seq, text=text, signature=signature)]
        out: list[Event] = [TextDelta(seq=seq, text=text)] if text else []
        if signature is not None:
            out.append(ReasoningDelta(seq=seq, signature=signature))
        return out

    def _part_signature(self, payload: Any, part: Any, seq: int) -> list[Event]:
        signature = part["thoughtSignature"]
        if not isinstance(signature, str) or not signature:
            return []
        return [ReasoningDelta(seq=seq, signature=signature)]

    def _part_function_call(self, payload: Any, part: Any, seq: int) -> list[Event]:
        call = part["functionCall"] or {}
        self._first_call.setdefault(seq, self._calls)
        if (self._streamed is not None or not call or "partialArgs" in call
                or call.get("willContinue") is True):
            if self._replaying:
                # the streamed call's state has moved on since this frame first came: parsing
                # it again would write its arguments twice
                return [UnknownEvent(seq=seq, type="part/functionCall.partial", raw=payload)]
            return self._streamed_part(part, call, seq)
        index = self._calls
        self._calls += 1
        args = call.get("args")
        out: list[Event] = [
            ToolCallDelta(
                seq=seq,
                index=index,
                id=call.get("id") or None,
                name=call.get("name") or None,
                arguments=dumps_compact(args if args is not None else {}),
            )
        ]
        signature = part.get("thoughtSignature")
        if isinstance(signature, str) and signature:
            out.append(ReasoningDelta(seq=seq, signature=signature))
        return out

    def _streamed_part(self, part: Any, call: Any, seq: int) -> list[Event]:
        """A part of a call whose arguments are streamed: it belongs to the open call unless it
        names another function or id; the call ends at a part without ``willContinue``."""
        id_, name = call.get("id") or None, call.get("name") or None
        out: list[Event] = []
        arguments = self._streamed
        index, open_id, open_name = self._streamed_call
        if arguments is not None and (
            (name is not None and open_name is not None and name != open_name)
            or (id_ is not None and open_id is not None and id_ != open_id)
        ):
            out.append(ToolCallDelta(seq=seq, index=index, arguments=arguments.close()))
            arguments = self._streamed = None
        first = arguments is None
        if arguments is None:
            if not call:  # the end marker ({}) of a call already ended, or of none
                return out
            arguments = self._streamed = StreamedArguments()
            index = self._calls
            self._calls += 1
            self._streamed_call = (index, id_, name)
        text = "".join([arguments.add(partial) for partial in call.get("partialArgs") or ()])
        whole = call.get("args")
        if whole:
            text += "".join([arguments.add_member(key, value) for key, value in whole.items()])
        if call.get("willContinue") is not True:
            text += arguments.close()
            self._streamed = None
        if first or text:
            out.append(ToolCallDelta(seq=seq, index=index, id=id_, name=name, arguments=text))
        signature = part.get("thoughtSignature")
        if isinstance(signature, str) and signature:
            out.append(ReasoningDelta(seq=seq, signature=signature))
        return out

    # -- the proxy's own frames and error bodies (what the mark says: resumption.py) ------------

    def proxy_error(self, domain: str, mark: Mapping[str, str], message: str,
                    provider_seq: int | None) -> tuple[str | None, dict[str, Any]]:
        """Google's error object; the mark is a ``google.rpc.ErrorInfo`` detail (Google's own
        way to name an error's cause): domain, the code as its reason, the rest as metadata.
        google-genai raises ``APIError`` with the body as ``details``."""
        info = {"@type": _ERROR_INFO, "reason": mark["code"].upper(), "domain": domain,
                "metadata": dict(mark)}
        return None, {"error": {"code": 500, "message": message, "status": "INTERNAL",
                                "details": [info]}}

    def proxy_mark_fields(self, payload: Any, domain: str) -> dict[str, str] | None:
        error = payload.get("error") if payload.__class__ is dict else None
        if not isinstance(error, dict) or not isinstance(details := error.get("details"), list):
            return None
        for detail in details:
            if detail.__class__ is dict and detail.get("domain") == domain:
                metadata = detail.get("metadata")
                message = error.get("message")
                if isinstance(metadata, dict):
                    return {**metadata, "message": message if isinstance(message, str) else ""}
        return None

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"code": status, "message": message,
                          "status": _GOOGLE_STATUS.get(status, "INTERNAL")}}


_ERROR_INFO: Final = "type.googleapis.com/google.rpc.ErrorInfo"
# Google's canonical status names of the HTTP statuses an error body of the proxy may have.
_GOOGLE_STATUS: Final = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
                         502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def _genai_part(part: dict[str, Any]) -> dict[str, Any]:
    text = part.get("text")
    if isinstance(text, str):
        return genai.part("reasoning" if part.get("thought") is True else "text", text)
    call = part.get("functionCall")
    if isinstance(call, dict):
        return genai.tool_call(call.get("id"), call.get("name"), call.get("args"))
    response = part.get("functionResponse")
    if isinstance(response, dict):
        return genai.tool_response(response.get("id"), response.get("response"))
    return genai.other(next((key for key in part if key not in ("thought", "thoughtSignature")),
                            None))
