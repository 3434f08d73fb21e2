"""Provider wire formats: one module per dialect, frames in, normalized events out.

``DIALECTS`` is the one registry: every name, provider and route is derived from it.
``get_dialect(name)`` gives a fresh object for one stream; ``detect_dialect(frame)`` names the
dialect of a body from its first frame and ``sniff_dialect(byte)`` from its first byte (for
``dialect="auto"``).
"""

from __future__ import annotations

from typing import Any, Final

from .._jsonparse import loads
from ..framing import FRAMINGS, Framing
from .anthropic import EVENT_TYPES as _ANTHROPIC_TYPES
from .anthropic import AnthropicDialect
from .base import DONE, Dialect, DialectBase
from .bedrock_converse import BedrockConverseDialect
from .bedrock_invoke import CHUNK as _BEDROCK_CHUNK
from .bedrock_invoke import BedrockInvokeDialect
from .gemini import GeminiDialect
from .ollama import OllamaDialect
from .openai_chat import OpenAIChatDialect
from .openai_responses import OpenAIResponsesDialect
from .routes import AsksStream, Provider, Route

__all__ = [
    "DIALECTS",
    "DIALECT_NAMES",
    "DONE",
    "PROVIDERS",
    "AsksStream",
    "BedrockConverseDialect",
    "BedrockInvokeDialect",
    "Dialect",
    "Provider",
    "Route",
    "detect_dialect",
    "dialect_class",
    "find_dialect",
    "get_dialect",
    "sniff_dialect",
    "sniff_framing",
]

DIALECTS: Final[tuple[type[DialectBase], ...]] = (
    OpenAIChatDialect,
    OpenAIResponsesDialect,
    AnthropicDialect,
    GeminiDialect,
    OllamaDialect,
    BedrockConverseDialect,
    BedrockInvokeDialect,
)
"""Every dialect, once. Adding a provider is its module and one line here."""

_BY_NAME: Final = {cls.name: cls for cls in DIALECTS}
DIALECT_NAMES: Final = tuple(_BY_NAME)
PROVIDERS: Final[tuple[Provider, ...]] = tuple(
    {cls.route.provider.name: cls.route.provider for cls in DIALECTS}.values()
)
"""The origins the proxy forwards to, in registry order."""

_ANTHROPIC_EVENTS: Final = frozenset(key for key in _ANTHROPIC_TYPES if "/" not in key)
_GEMINI_FIELDS: Final = ("candidates", "promptFeedback", "usageMetadata", "modelVersion")


def dialect_class(name: str) -> type[DialectBase]:
    """The dialect registered under ``name``; ``ValueError`` for an unknown name."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown dialect {name!r}; valid names: {', '.join(DIALECT_NAMES)}"
        ) from None


def find_dialect(name: str) -> type[DialectBase] | None:
    """The dialect registered under ``name``, or ``None`` (a journal also holds app streams of
    ``unbroken.server``, whose "dialect" is no provider's)."""
    return _BY_NAME.get(name)


def get_dialect(name: str) -> Dialect:
    """A new dialect object for one stream; ``ValueError`` for an unknown name."""
    return dialect_class(name)()


def sniff_dialect(first: int) -> Dialect | None:
    """The dialect of a body told by its first non-whitespace byte, when its framing is the only
    one that starts so and one dialect alone uses that framing (``{``: Ollama's NDJSON)."""
    found = [cls for cls in DIALECTS if cls.framing.sniff == first]
    return found[0]() if len(found) == 1 else None


def sniff_framing(first: int) -> Framing | None:
    """The framing of a body told by its first non-whitespace byte (``\\x00``: an AWS event
    stream, whose dialect its first message tells)."""
    return next((framing for framing in FRAMINGS if framing.sniff == first), None)


def detect_dialect(frame: Any) -> str | None:
    """The dialect of a stream judged by its first frame, or ``None`` when it cannot tell.

    An NDJSON line is Ollama. An event-stream message is Bedrock's: InvokeModelWithResponseStream
    when its event type is ``chunk`` (every event of that operation is), else Converse (whose
    events are named for what they hold; an exception reads the same in both). An SSE event is
    judged by its name first (Anthropic and Responses name every event), then by the shape of
    its JSON data.
    """
    if hasattr(frame, "headers"):
        if frame.headers.get(":event-type") == _BEDROCK_CHUNK:
            return BedrockInvokeDialect.name
        return BedrockConverseDialect.name
    if not hasattr(frame, "event"):
        return OllamaDialect.name if hasattr(frame, "value") else None
    event: str = frame.event
    if event.startswith("response."):
        return OpenAIResponsesDialect.name
    data: str = frame.data
    if data.startswith("[DONE]"):
        return OpenAIChatDialect.name
    try:
        payload = loads(data)
    except ValueError:
        payload = None
    if event != "message" and event in _ANTHROPIC_EVENTS:
        # both Anthropic and Responses name their error event "error"
        if event == "error" and isinstance(payload, dict) and "sequence_number" in payload:
            return OpenAIResponsesDialect.name
        return AnthropicDialect.name
    if not isinstance(payload, dict):
        return None
    return _detect_by_shape(payload)


def _detect_by_shape(payload: dict[str, Any]) -> str | None:
    kind = payload.get("type")
    if isinstance(kind, str):
        if kind.startswith("response.") or "sequence_number" in payload:
            return OpenAIResponsesDialect.name
        if kind in _ANTHROPIC_EVENTS:
            return AnthropicDialect.name
    if "choices" in payload or str(payload.get("object", "")).startswith("chat.completion"):
        return OpenAIChatDialect.name
    if any(field in payload for field in _GEMINI_FIELDS):
        return GeminiDialect.name
    error = payload.get("error")
    if isinstance(error, dict):
        # Google's error objects carry a canonical status name; OpenAI's carry a type
        return GeminiDialect.name if "status" in error else OpenAIChatDialect.name
    return None
