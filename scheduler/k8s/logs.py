"""structlog set-up for the operator: one line per event, JSON when not on a terminal, readable on one.

The standard library's loggers (kopf, aiohttp, kubernetes_asyncio) go through the same renderer, so a cluster's
log pipeline sees one format.
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
