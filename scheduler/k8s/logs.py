"""structlog set-up for the operator: one line per event, JSON when not on a terminal, readable on one.

The standard library's loggers (kopf, aiohttp, kubernetes_asyncio) go through the same renderer, so a cluster's
log pipeline sees one format.

kopf logs every failed attempt of a request it retries as an ERROR ("Request attempt #1/9 failed; will retry"): a
replica started with its API server logged three of them while the server's storage initialised, and then
worked. A retry is not an error, so those lines are told at INFO (:class:`RetryIsNotAnError`); the attempt kopf
gives up after ("failed; escalating") and everything else stays as kopf logs it.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

Format = Literal["auto", "json", "console"]


def configure(fmt: Format = "auto", *, level: int = logging.INFO) -> str:
    """Configure structlog and stdlib logging; returns the format chosen (``json`` or ``console``)."""
    chosen = fmt if fmt != "auto" else ("console" if sys.stderr.isatty() else "json")
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if chosen == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RetryIsNotAnError())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return chosen


class RetryIsNotAnError(logging.Filter):
    """Tells kopf's "Request attempt ... failed; will retry" at INFO instead of ERROR (see the module notes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.levelno == logging.ERROR
            and record.name.startswith("kopf")
            and "failed; will retry" in record.getMessage()
        ):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True
