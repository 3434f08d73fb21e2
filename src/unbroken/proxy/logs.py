"""Secrets never reach the logs: query parameters that carry one are redacted.

Gemini puts the API key in ``?key=``, and a browser's ``EventSource`` puts the stream token in
``?token=``; uvicorn's access log writes the whole request target. ``RedactSecrets`` is a logging
filter that rewrites those values to ``REDACTED`` in every record of the loggers it is installed
on (uvicorn's access and error loggers, and the proxy's own).
"""

from __future__ import annotations

import logging
import re

__all__ = ["REDACTED", "RedactSecrets", "install_redaction", "redact"]

REDACTED = "REDACTED"
_SECRET_PARAM = re.compile(r"([?&](?:key|token|api_key|access_token)=)[^&#\s\"']*", re.IGNORECASE)
_LOGGERS = ("uvicorn.access", "uvicorn.error", "unbroken.proxy")


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
