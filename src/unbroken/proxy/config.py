"""``ProxyConfig``: where each provider's requests go, where the journal lives, and the policies."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from ..dialects import PROVIDERS as _PROVIDERS
from ..framing import DEFAULT_MAX_EVENT_SIZE
from ..streams.journal import journal_for
from ..streams.journal.live import TAIL_FRAMES

__all__ = ["DEFAULT_ORIGINS", "PROVIDERS", "ProxyConfig", "cors_origin", "parse_duration"]

PROVIDERS = tuple(provider.name for provider in _PROVIDERS)
DEFAULT_ORIGINS = {provider.name: provider.default_origin for provider in _PROVIDERS}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_UNIT_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``24h`` or ``7d``; ``ValueError`` otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 24h, 7d)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _origin(name: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{name}: an origin is scheme://host[:port], not {value!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{name}: an origin has no path, query or fragment: {value!r}")
    return f"{parts.scheme}://{parts.netloc}"


def cors_origin(value: str) -> str:
    """``value`` if it is ``*`` or an origin exactly as a browser sends it in ``Origin``
    (``scheme://host[:port]``, lower case, no default port, no path); ``ValueError`` otherwise.

    The CORS check compares strings, so a form a browser never sends (``http://app:3000/``,
    ``HTTP://App``, ``https://app:443``) would silently never match: it is refused instead.
    """
    if value == "*":
        return value
    problem = f"a CORS origin is * or scheme://host[:port] with no path, not {value!r}"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ValueError(problem) from None
    if not _SCHEME.fullmatch(parts.scheme) or not parts.hostname or "*" in value:
        raise ValueError(problem)
    if parts.username is not None or parts.password is not None:
        raise ValueError(problem)
    default = _DEFAULT_PORTS.get(parts.scheme)
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    canonical = f"{parts.scheme}://{host}" + ("" if port in (None, default) else f":{port}")
    if parts.path not in ("", "/") or "?" in value or "#" in value:
        raise ValueError(problem)
    if value != canonical:
        raise ValueError(f"{problem}; browsers send {canonical!r}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    """Everything ``create_app`` needs. Durations are in seconds.

    ``origins`` maps a provider's name (``PROVIDERS``: openai, anthropic ...) to the origin its
    requests go to; a provider not named goes to its default (``DEFAULT_ORIGINS``).

    ``on_disconnect="cancel"`` stops a generation once no reader has been attached for
    ``cancel_after`` seconds (0 when unset); with ``"keep"`` (the default) a generation runs to
    its end, unless ``cancel_after`` is set, which then bounds how long it runs unread.

    Limits (``None``: none): ``max_body`` bytes of a streaming request's body (413; other
    requests pass through unbuffered and unlimited), ``max_streams_per_key``
    live streams per credential (429), ``max_streams`` live streams in all (503). ``idle_close``:
    seconds an idle downstream keep-alive connection stays open. ``shutdown_grace``: seconds live
    streams get to finish on SIGTERM before they are marked interrupted. A producer's lease
    lasts ``lease_ttl`` seconds and is renewed every ``lease_renew`` seconds.

    ``request_usage``: ask the providers that report a stream's usage only when asked (OpenAI
    chat: ``stream_options.include_usage``) for it, when the request did not say; the chunk
    that answers is journaled in the stream's state and kept out of the client's body.

    ``otel``: record every stream as an OpenTelemetry GenAI span and metrics through the global
    providers (``unbroken.telemetry``; needs the ``otel`` extra); ``otel_chunk_intervals``:
    time per output chunk as one point per stream (``mean``) or per output frame (``each``),
    ``telemetry.instrument``'s ``chunk_intervals``.
    """

    origins: Mapping[str, str] = field(default_factory=dict)
    store: str = "sqlite:///unbroken.db"
    on_disconnect: Literal["keep", "cancel"] = "keep"
    cancel_after: float | None = None
    retention: float = 24 * 3600.0
    expire_every: float = 60.0
    keepalive: float = 15.0
    retry_ms: int = 1000
    connect_timeout: float = 10.0
    read_timeout: float = 300.0
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE
    tail_frames: int = TAIL_FRAMES
    upstream_resumes: int = 5
    max_body: int | None = 32 * 2**20
    max_streams: int | None = None
    max_streams_per_key: int | None = None
    idle_close: float = 75.0
    shutdown_grace: float = 5.0
    request_usage: bool = True
    lease_ttl: float = 15.0
    lease_renew: float = 5.0
    cors_origins: tuple[str, ...] = ()
    otel: bool = False
    otel_chunk_intervals: Literal["mean", "each"] = "mean"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.origins) - set(PROVIDERS))
        if unknown:
            raise ValueError(f"origins: unknown provider {unknown[0]!r}; providers: "
                             f"{', '.join(PROVIDERS)}")
        object.__setattr__(self, "origins", {
            provider: _origin(provider, self.origins.get(provider, default))
            for provider, default in DEFAULT_ORIGINS.items()
        })
        given: object = self.cors_origins  # a caller may pass a list, or one string by mistake
        if isinstance(given, str) or not isinstance(given, tuple | list):
            raise ValueError(f"cors_origins is a tuple of origins, not {given!r}")
        origins = tuple(given)
        for origin in origins:
            if not isinstance(origin, str):
                raise ValueError(f"cors_origins holds strings, not {origin!r}")
            try:
                cors_origin(origin)
            except ValueError as error:
                raise ValueError(f"cors_origins: {error}") from None
        object.__setattr__(self, "cors_origins", origins)
        if self.on_disconnect not in ("keep", "cancel"):
            raise ValueError(f"on_disconnect must be keep or cancel, not {self.on_disconnect!r}")
        for name in ("retention", "expire_every", "keepalive", "connect_timeout",
                     "read_timeout", "idle_close", "lease_ttl", "lease_renew"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.cancel_after is not None and not 0 <= self.cancel_after < math.inf:
            raise ValueError(f"cancel_after must be >= 0 seconds, not {self.cancel_after!r}")
        if not 0 <= self.shutdown_grace < math.inf:
            raise ValueError(f"shutdown_grace must be >= 0 seconds, not {self.shutdown_grace!r}")
        if self.lease_renew >= self.lease_ttl:
            raise ValueError("lease_renew must be shorter than lease_ttl "
                             f"({self.lease_renew!r} >= {self.lease_ttl!r})")
        for name in ("max_body", "max_streams", "max_streams_per_key", "max_event_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        journal_for(self.store)  # a store URL it cannot name is refused here, not at startup

    def origin(self, provider: str) -> str:
        return self.origins[provider]

    @property
    def idle_cancel_after(self) -> float | None:
        """Seconds a generation may run with no reader attached; ``None``: no limit."""
        if self.on_disconnect == "cancel":
            return self.cancel_after or 0.0
        return self.cancel_after
