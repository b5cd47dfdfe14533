"""structlog set-up for the operator: one line per event, JSON when not on a terminal, readable on one.

The standard library's loggers (kopf, aiohttp, kubernetes_asyncio) go through the same renderer, so a cluster's
log pipeline sees one format. gpusched's own lines do not pass through the standard library's logging on their way
(:class:`StderrLogger`): the same processors write them, at a third of the CPU a line (each bound pod logs one).

kopf logs every failed attempt of a request it retries as an ERROR ("Request attempt #1/9 failed; will retry"): a
replica started with its API server logged three of them while the server's storage initialised, and then
worked. A retry is not an error, so those lines are told at INFO (:class:`RetryIsNotAnError`); the attempt kopf
gives up after ("failed; escalating") and everything else stays as kopf logs it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any, Literal, TextIO

import orjson
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
        renderer = structlog.processors.JSONRenderer(serializer=_json_line)
        shared.append(structlog.processors.format_exc_info)
    else:
        # Plain tracebacks whatever is installed (rich or better-exceptions would change them): a terminal's lines are
        # a log's lines too, and structlog is imported without rich (scheduler.k8s.lean_imports, import_structlog).
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    structlog.configure(
        processors=[*shared, renderer],
        logger_factory=StderrLogger.named,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=True,
    )
    handler = _StderrHandler(sys.stderr)
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


def _json_line(event: Any, *, default: Any = None, **_: Any) -> str:
    """A line's JSON, by orjson: a fifteenth of the standard library's CPU for the ``bound`` line each pod logs (0.4
    against 6.7 us here). What orjson cannot write (an integer beyond 64 bits) is written by the standard library, so
    that no line is ever lost to its encoder."""
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(event, default=default)


#: The one lock every line to standard error is written under, gpusched's own (:class:`StderrLogger`) and the standard
#: library's (:class:`_StderrHandler`), so that lines of two threads never mix. Reentrant, as a logging handler's lock
#: is (a formatter that logs would otherwise deadlock).
_WRITE_LOCK = threading.RLock()


class StderrLogger:
    """structlog's logger for gpusched's own lines: it writes each rendered line to standard error as it is then (one
    write, under :data:`_WRITE_LOCK`), with the name it was asked for
    (``structlog.get_logger(__name__)``), which ``add_logger_name`` puts in the line as the standard library's
    loggers' names are. The line is what the standard library's handler wrote before, without the record it made,
    its handler and its formatter's copy of the event."""

    def __init__(self, name: str = "") -> None:
        self.name = name

    @classmethod
    def named(cls, *args: Any) -> StderrLogger:
        """The factory structlog calls with ``get_logger``'s arguments: the first, if any, is the name."""
        return cls(str(args[0]) if args else "")

    def msg(self, message: str) -> None:
        with _WRITE_LOCK:
            stream = sys.stderr
            stream.write(message + "\n")
            stream.flush()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


class _StderrHandler(logging.StreamHandler[TextIO]):
    """The standard library's lines (kopf, aiohttp, the client), written under :data:`_WRITE_LOCK` too."""

    def createLock(self) -> None:  # noqa: N802 (logging's name)
        self.lock = _WRITE_LOCK


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
