"""Logging set-up: structlog for hoodied's own lines, stdlib ``logging`` routed through it.

The table-format layer logs with the standard library (it stays free of structlog); here
every record, ours or a library's, leaves as one JSON object per line (the daemon's
default) or as a short console line (interactive commands), always on standard error so
standard output stays clean for ``--json`` results.

Libraries' loggers: py4j (pyspark's bridge to a local Spark JVM) logs every connection it closes at
INFO ("Closing down clientserver connection"); it is held at WARNING whatever hoodied's level, so only
its real trouble shows, in hoodied's format. A local Spark's JVM writes its own lines to its standard
error: ``child_stderr_logged`` makes that a pipe whose lines become log records (logger
``hoodied.spark``, the level of each log4j line), and their level is set where the JVM starts
(``service.spark_jobs.spark_log_conf``), so what is left of them reaches the terminal in hoodied's
format, never in the middle of a status line. Spark's reports of a failed task (the exception, the
Java stack and the task's Python traceback) are DEBUG records: the job's error says it in one line.

``live_line`` owns the one status line a command may redraw in place on a terminal (a progress bar, a
spinner): while it is shown, each log record first clears it, is written on a line of its own, and the
status line is drawn again below it, so a log line is never written into a bar.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from typing import Literal, TextIO

import structlog

__all__ = [
    "LIBRARY_LEVELS", "LiveLine", "LogFormat", "child_stderr_logged", "configure_logging", "get_logger",
    "live_line",
]

LogFormat = Literal["json", "console"]

#: Loggers of libraries held at a level of their own, whatever hoodied's level is.
LIBRARY_LEVELS = {"py4j": logging.WARNING}

# one lock for the live line and the log lines written around it (a spinner thread draws it too)
_LOCK = threading.RLock()
_live: LiveLine | None = None
_stream: TextIO | None = None
"""Where records and the live line go: standard error as ``configure_logging`` found it (moved by
``child_stderr_logged`` while a child starts)."""


def _out() -> TextIO:
    return _stream if _stream is not None else sys.stderr

#: A log4j line of a Spark JVM (``service/spark-log4j2.properties``: ``%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m``).
_LOG4J_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ([^:]+): (.*)$")
_JVM_NOTICE = "WARNING: "  # how the JVM itself prints a notice (not through log4j)
#: Spark's own reports of a failed task (``logger: message`` of a log4j line): the failure reaches the
#: driver as the job's error, which hoodied reports in one line, so these (and the stack and Python
#: traceback printed under them) are DEBUG records, shown with ``--debug`` only.
_TASK_FAILURE = re.compile(
    r"^(?:Executor: Exception in task |TaskSetManager: (?:Lost task |Task \S+ in stage \S+ failed \d+ times))"
)
_LOG4J_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
                 "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}


class LiveLine:
    """The status line at the bottom of the terminal on standard error, redrawn in place
    (``live_line`` makes it)."""

    def __init__(self) -> None:
        self.text = ""

    def show(self, text: str) -> None:
        """Replace the line's text and draw it."""
        with _LOCK:
            self.text = text
            self._draw()

    def clear(self) -> None:
        with _LOCK:
            _out().write("\r\x1b[K")
            _out().flush()

    def _draw(self) -> None:
        width = max(shutil.get_terminal_size((80, 24)).columns - 1, 10)
        _out().write("\r" + self.text[:width] + "\x1b[K")
        _out().flush()


@contextlib.contextmanager
def live_line() -> Iterator[LiveLine]:
    """A status line on standard error until the block ends; it is cleared then. One at a time: a
    second one inside the first takes its place until it ends."""
    global _live
    line = LiveLine()
    with _LOCK:
        outer, _live = _live, line
    try:
        yield line
    finally:
        with _LOCK:
            line.clear()
            _live = outer
            if outer is not None and outer.text:
                outer._draw()


class _Handler(logging.StreamHandler[TextIO]):
    """Writes records to standard error (``_stream``), around the live line (the module docstring)."""

    def emit(self, record: logging.LogRecord) -> None:
        with _LOCK:
            self.stream = _out()
            live = _live if _live is not None and _live.text else None
            if live is not None:
                live.clear()
            super().emit(record)
            if live is not None:
                live._draw()


def _log_child_lines(pipe: int, logger: logging.Logger) -> None:
    """Each line a child process writes into ``pipe`` as a log record of ``logger``: the level of a
    log4j line; DEBUG for the JVM's own ``WARNING: ...`` notices (about how Spark's JVM was built or
    started, "Using incubator modules": nothing an operator can act on); WARNING for anything else (a
    Python worker's traceback); a traceback's lines keep the level of the line before them. Spark's
    reports of a failed task (``_TASK_FAILURE``) are DEBUG, and so is every line under them up to the
    next log4j line: the exception log4j prints there holds unindented lines too (the Java exception's
    first line, the Python exception's last). Runs until every writer closed the pipe (the child exited)."""
    level = logging.WARNING
    task_failure = False
    with open(pipe, "rb") as lines:
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip()
            if not text:
                continue
            found = _LOG4J_LINE.match(text)
            if found:
                task_failure = _TASK_FAILURE.match(f"{found.group(2)}: {found.group(3)}") is not None
                level = logging.DEBUG if task_failure else _LOG4J_LEVELS[found.group(1)]
                logger.log(level, "%s: %s", found.group(2), found.group(3))
            elif task_failure or text[0].isspace() or text.startswith(("Caused by", "at ")):
                logger.log(level, "%s", text)
            elif text.startswith(_JVM_NOTICE):
                level = logging.DEBUG
                logger.log(level, "%s", text.removeprefix(_JVM_NOTICE))
            else:
                level = logging.WARNING
                logger.log(level, "%s", text)


@contextlib.contextmanager
def child_stderr_logged(logger_name: str) -> Iterator[None]:
    """Child processes started in the block (a local Spark's JVM) write their standard error into
    hoodied's logging (``logger_name``), for as long as they run, instead of onto the terminal or into
    a JSON log stream as raw lines: file descriptor 2 is a pipe while the block runs, and this process's
    own writes go meanwhile to the real standard error through a stream of its own. Nothing is done
    when standard error is not the process's file descriptor 2 (a test runner's capture)."""
    global _stream
    current = _out()
    try:
        if current.fileno() != 2:
            raise OSError("standard error is not file descriptor 2")
    except (AttributeError, OSError, ValueError):
        yield
        return
    with _LOCK:
        current.flush()
        real = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        _stream = open(real, "w", encoding=current.encoding, errors="backslashreplace", buffering=1,
                       closefd=False)
        moved = sys.stderr is current  # what else this process writes to standard error goes there too
        if moved:
            sys.stderr = _stream
    threading.Thread(target=_log_child_lines, args=(read_end, logging.getLogger(logger_name)),
                     name=f"{logger_name}-stderr", daemon=True).start()
    try:
        yield
    finally:
        with _LOCK:  # no record is being written while the streams change back
            _stream.flush()
            if moved:
                sys.stderr = current
            _stream = current
            os.dup2(real, 2)
            os.close(real)


def configure_logging(fmt: LogFormat = "console", level: str = "INFO") -> None:
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    global _stream
    _stream = sys.stderr
    handler = _Handler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name, library_level in LIBRARY_LEVELS.items():
        logging.getLogger(name).setLevel(library_level)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
