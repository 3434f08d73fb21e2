"""The OpenTelemetry GenAI conventions' message shape, for the dialects that read a request into it.

``gen_ai.input.messages`` is a JSON list of ``{"role": ..., "parts": [...]}`` and
``gen_ai.system_instructions`` a list of parts. A part is ``{"type": "text", "content": ...}``,
``{"type": "reasoning", "content": ...}``, ``{"type": "tool_call", "id", "name",
"arguments"}``, ``{"type": "tool_call_response", "id", "response"}``, or for anything else (an
image, a document, audio) only its provider type: ``{"type": "image"}``. Media are never copied
into a span. Each dialect's ``genai_input`` maps its own request body with these builders; a
field of the wrong type is left out, never raised on (telemetry never breaks a stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["GenAIInput", "chat_messages", "function_calls", "items", "message", "other", "part",
           "reasoning", "text", "text_or_other", "tool_call", "tool_response"]

# (input messages, system instructions)
GenAIInput = tuple[list[dict[str, Any]], list[dict[str, Any]]]

Part = dict[str, Any]


def part(kind: str, content: str) -> Part:
    """A part with content: ``text`` or ``reasoning``."""
    return {"type": kind, "content": content}


def text(content: Any) -> list[Part]:
    """A text part, or none when ``content`` is not a non-empty string."""
    return [part("text", content)] if isinstance(content, str) and content else []


def reasoning(content: Any) -> list[Part]:
    """A reasoning part, or none when ``content`` is not a non-empty string."""
    return [part("reasoning", content)] if isinstance(content, str) and content else []


def tool_call(id_: Any, name: Any, arguments: Any) -> Part:
    return {"type": "tool_call", "id": id_ if isinstance(id_, str) else None,
            "name": name if isinstance(name, str) else None, "arguments": arguments}


def chat_messages(value: Any, content: Callable[[dict[str, Any]], list[Part]],
                  system_roles: tuple[str, ...]) -> GenAIInput:
    """Messages in OpenAI chat's shape, which Ollama shares: a ``tool`` message answers
    ``tool_call_id``, an assistant's ``tool_calls`` are calls, ``system_roles`` give the
    instructions; ``content`` reads the rest of a message into parts."""
    messages: list[dict[str, Any]] = []
    system: list[Part] = []
    for item in items(value):
        role = item.get("role")
        if role == "tool":
            parts = [tool_response(item.get("tool_call_id"), item.get("content"))]
        else:
            parts = content(item)
        parts += function_calls(item.get("tool_calls"))
        if role in system_roles:
            system += parts
        else:
            messages.append(message(role, parts))
    return messages, system


def function_calls(value: Any) -> list[Part]:
    """Tool calls in OpenAI's shape (``[{"id", "function": {"name", "arguments"}}]``), which
    OpenAI chat and Ollama share."""
    out = []
    for call in items(value):
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        out.append(tool_call(call.get("id"), function.get("name"), function.get("arguments")))
    return out


def tool_response(id_: Any, response: Any) -> Part:
    return {"type": "tool_call_response", "id": id_ if isinstance(id_, str) else None,
            "response": response}


def other(kind: Any) -> Part:
    """A part the conventions have no content type for: its provider type only."""
    return {"type": kind if isinstance(kind, str) and kind else "unknown"}


def text_or_other(block: dict[str, Any], text_types: tuple[str, ...], key: str = "text") -> Part:
    """A content block: a text part when its ``type`` is one of ``text_types`` and ``key``
    holds text, else ``other``."""
    content = block.get(key)
    if block.get("type") in text_types and isinstance(content, str):
        return part("text", content)
    return other(block.get("type"))


def message(role: Any, parts: list[Part]) -> dict[str, Any]:
    return {"role": role if isinstance(role, str) else "user", "parts": parts}


def items(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (anything else: none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
