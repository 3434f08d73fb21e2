"""Structured logs, with no secrets: one ``key=value`` line per record (logfmt).

``log_event("stream.status", stream_id=..., seq=..., status=...)`` writes a structured record;
``LogfmtFormatter`` renders it (and uvicorn's own records) as ``ts= level= logger= event= ...``,
and ``log_config(level)`` is the logging configuration ``python -m unbroken.proxy`` gives uvicorn,
so its access log goes through the same formatter and redaction.

Secrets never reach the logs: query parameters that carry one are redacted.

Gemini puts the API key in ``?key=``, and a browser's ``EventSource`` puts the stream token in
``?token=``; uvicorn's access log writes the whole request target. ``RedactSecrets`` is a logging
filter that rewrites those values to ``REDACTED`` in every record of the loggers it is installed
on (uvicorn's access and error loggers, and the proxy's own).
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

__all__ = [
    "REDACTED",
    "LogfmtFormatter",
    "RedactSecrets",
    "install_redaction",
    "log_config",
    "log_event",
    "redact",
]

REDACTED = "REDACTED"
_SECRET_PARAM = re.compile(r"([?&](?:key|token|api_key|access_token)=)[^&#\s\"']*", re.IGNORECASE)
_LOGGERS = ("uvicorn.access", "uvicorn.error", "unbroken.proxy")
_BARE = re.compile(r"[A-Za-z0-9_.:/@+-]+")
log = logging.getLogger("unbroken.proxy")


def redact(text: str) -> str:
    """``text`` with the values of secret-carrying query parameters replaced."""
    return _SECRET_PARAM.sub(rf"\g<1>{REDACTED}", text)


class RedactSecrets(logging.Filter):
    """Redacts secret query parameters in a record's arguments and message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install_redaction() -> None:
    """Add the filter to the loggers that may see a request target (once each)."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactSecrets) for existing in logger.filters):
            logger.addFilter(RedactSecrets())


def log_event(event: str, /, *, level: int = logging.INFO, **fields: Any) -> None:
    """One structured record of the proxy: an event name and its fields (``None`` left out)."""
    if log.isEnabledFor(level):
        kept = {name: value for name, value in fields.items() if value is not None}
        # The message reads whole under any formatter; LogfmtFormatter uses the parts.
        line = " ".join([event, *(f"{name}={_value(value)}" for name, value in kept.items())])
        log.log(level, "%s", line, extra={"fields": kept, "event_name": event})


def _value(value: Any) -> str:
    if isinstance(value, float):
        value = round(value, 6)
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=... logger=... event=<name> field=value ...`` for ``log_event`` records,
    ``msg="..."`` for any other; values with spaces or quotes are JSON strings. Every text
    value is redacted before it is quoted, so a secret in an exception text cannot slip
    through either."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        pairs: list[tuple[str, Any]] = [
            ("ts", f"{stamp}.{int(record.msecs):03d}Z"),
            ("level", record.levelname.lower()),
            ("logger", record.name),
        ]
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            pairs.append(("event", getattr(record, "event_name", "")))
            pairs.extend(fields.items())
        else:
            pairs.append(("msg", record.getMessage()))
        if record.exc_info:
            pairs.append(("exc", self.formatException(record.exc_info)))
        return " ".join(
            f"{name}={_value(redact(value) if isinstance(value, str) else value)}"
            for name, value in pairs
        )


def log_config(level: str = "info") -> dict[str, Any]:
    """``logging.config.dictConfig`` input: uvicorn's loggers and the proxy's, one stderr
    handler with ``LogfmtFormatter`` and ``RedactSecrets``."""
    upper = level.upper()
    handler = {"handlers": ["stderr"], "level": upper, "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": RedactSecrets}},
        "formatters": {"logfmt": {"()": LogfmtFormatter}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                       "formatter": "logfmt", "filters": ["redact"]},
        },
        "loggers": {
            "uvicorn": handler,
            "uvicorn.error": {"level": upper},
            "uvicorn.access": handler,
            "unbroken": handler,
        },
    }
