"""Adapters for the official SDKs: keep the SDK's loop and objects, gain the state machine.

``from_openai(stream)``, ``from_anthropic(stream)``, ``from_gemini(stream)``,
``from_ollama(stream)`` and ``from_bedrock(response)`` return an iterable that yields the SDK's
own objects unchanged and builds a ``Message`` (``tracked.message``) through the dialects' own
tables. The SDKs themselves are not imported here: each adapter works from the objects it is
given, so unbroken does not depend on them.
"""

from .anthropic import from_anthropic
from .bedrock import from_bedrock
from .gemini import from_gemini
from .ollama import from_ollama
from .openai import from_openai
from .tracked import AsyncTrackedStream, TrackedStream

__all__ = [
    "AsyncTrackedStream",
    "TrackedStream",
    "from_anthropic",
    "from_bedrock",
    "from_gemini",
    "from_ollama",
    "from_openai",
]
