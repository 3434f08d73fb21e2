"""Where a provider's requests go through the proxy, as data each dialect holds.

``Provider`` is an origin the proxy forwards to (one per ``--openai``, ``--anthropic`` ... option);
several dialects may share one (OpenAI's Chat Completions and Responses). ``Route`` says which
requests of a provider stream in the dialect: exact POST paths, or a path pattern whose method
group names a streaming method (Gemini's ``:streamGenerateContent``, Bedrock's
``/converse-stream``), and how the request asks for the stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["AsksStream", "Provider", "Route"]


class AsksStream(Enum):
    """How a request to a streaming route asks for the stream (else it passes through)."""

    BODY_TRUE = "body-true"  # a JSON body with "stream": true
    BODY_UNLESS_FALSE = "body-unless-false"  # streams unless "stream": false (Ollama)
    QUERY_ALT_SSE = "query-alt-sse"  # ?alt=sse (Gemini)
    ALWAYS = "always"  # the path alone (Bedrock's converse-stream)


@dataclass(frozen=True, slots=True, kw_only=True)
class Provider:
    """An origin: its name (the proxy's option and config key), its default, and how a request
    that no route claims is still known to be for it (a path prefix, a header only its clients
    send). ``fallback``: requests that match no provider at all go here."""

    name: str
    default_origin: str
    prefixes: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    fallback: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """``paths``: POST paths that stream. ``pattern``: a path regex whose ``method`` group is
    looked up in ``stream_methods`` (a match with another method is the provider's, unstreamed)."""

    provider: Provider
    paths: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    stream_methods: frozenset[str] = frozenset()
    asks: AsksStream = AsksStream.BODY_TRUE

    def model_of(self, path: str) -> str | None:
        """The model named in the path (the pattern's ``model`` group), if the route has one."""
        match = self.pattern.fullmatch(path) if self.pattern is not None else None
        if match is None or "model" not in match.re.groupindex:
            return None
        return match.group("model")

    def claims(self, method: str, path: str) -> bool | None:
        """True: a POST of this dialect's stream; False: the provider's, not streamed; None:
        not this route's."""
        if method == "POST" and path in self.paths:
            return True
        if self.pattern is not None:
            match = self.pattern.fullmatch(path)
            if match is not None:
                return method == "POST" and match.group("method") in self.stream_methods
        return None
