"""Provider wire formats: one module per dialect, frames in, normalized events out.

``get_dialect(name)`` gives a fresh object for one stream; ``detect_dialect(frame)`` names the
dialect of a body from its first frame (for ``dialect="auto"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ..jsonparse import loads
from .anthropic import EVENT_TYPES as _ANTHROPIC_TYPES
from .anthropic import AnthropicDialect
from .base import DONE, Dialect
from .gemini import GeminiDialect
from .ollama import OllamaDialect
from .openai_chat import OpenAIChatDialect
from .openai_responses import OpenAIResponsesDialect

__all__ = ["DIALECT_NAMES", "DONE", "Dialect", "detect_dialect", "get_dialect"]

_DIALECTS: Final[dict[str, Callable[[], Dialect]]] = {
    "openai-chat": OpenAIChatDialect,
    "openai-responses": OpenAIResponsesDialect,
    "anthropic": AnthropicDialect,
    "gemini": GeminiDialect,
    "ollama": OllamaDialect,
}

DIALECT_NAMES: Final = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama")

_ANTHROPIC_EVENTS: Final = frozenset(key for key in _ANTHROPIC_TYPES if "/" not in key)
_GEMINI_FIELDS: Final = ("candidates", "promptFeedback", "usageMetadata", "modelVersion")


def get_dialect(name: str) -> Dialect:
    """A new dialect object for one stream; ``ValueError`` for an unknown name."""
    try:
        cls = _DIALECTS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown dialect {name!r}; valid names: {', '.join(DIALECT_NAMES)}"
        ) from None
    return cls()


def detect_dialect(frame: Any) -> str | None:
    """The dialect of a stream judged by its first frame, or ``None`` when it cannot tell.

    An NDJSON line is Ollama. An SSE event is judged by its name first (Anthropic and Responses
    name every event), then by the shape of its JSON data.
    """
    if not hasattr(frame, "event"):
        return "ollama" if hasattr(frame, "value") else None
    event: str = frame.event
    if event.startswith("response."):
        return "openai-responses"
    data: str = frame.data
    if data.startswith("[DONE]"):
        return "openai-chat"
    try:
        payload = loads(data)
    except ValueError:
        payload = None
    if event != "message" and event in _ANTHROPIC_EVENTS:
        # both Anthropic and Responses name their error event "error"
        if event == "error" and isinstance(payload, dict) and "sequence_number" in payload:
            return "openai-responses"
        return "anthropic"
    if not isinstance(payload, dict):
        return None
    return _detect_by_shape(payload)


def _detect_by_shape(payload: dict[str, Any]) -> str | None:
    kind = payload.get("type")
    if isinstance(kind, str):
        if kind.startswith("response.") or "sequence_number" in payload:
            return "openai-responses"
        if kind in _ANTHROPIC_EVENTS:
            return "anthropic"
    if "choices" in payload or str(payload.get("object", "")).startswith("chat.completion"):
        return "openai-chat"
    if any(field in payload for field in _GEMINI_FIELDS):
        return "gemini"
    error = payload.get("error")
    if isinstance(error, dict):
        # Google's error objects carry a canonical status name; OpenAI's carry a type
        return "gemini" if "status" in error else "openai-chat"
    return None
